"""Linear attention across ranks without torch or a GPU
(attnc._linear_cp_plan): the decay_mod evaluated over a shard against each
example's formula, the scan of per-rank state transforms against a float64
host model of the whole-sequence recurrence (W = 1 to 4, ragged shards,
with and without an initial state), a wrong scan that the model catches,
and which definitions are refused, with what."""

import unittest

import numpy as np

import attnc
from attnc import _linear_cp_plan as plan
from attnc import dsl
from attnc.dsl import InputShape

F = plan.backend_of(np)


def recurrence(q, k, v, g, state):
    """The token recurrence in float64, per (batch, head): S_t =
    exp(g_t)·S_{t-1} + k_tᵀv_t, o_t = q_t·S_t (q, k, v after their mods,
    [B,H,T,D|DV]; g [B,H,T]). Returns (out, final state)."""
    out = np.zeros(v.shape)
    state = state.copy()
    for t in range(q.shape[2]):
        state = (np.exp(g[:, :, t])[..., None, None] * state
                 + k[:, :, t, :, None] * v[:, :, t, None, :])
        out[:, :, t] = np.einsum("bhd,bhde->bhe", q[:, :, t], state)
    return out, state


class Example:
    """An example with its mods in numpy (the formulas of
    dsl_examples/), to build the host model from."""

    def __init__(self, name, rng, b, h, n, d):
        self.name, self.d = name, d
        self.definition = attnc.example(name)
        self.decay = rng.uniform(-1.0, 0.0, (b, h, n))
        self.inputs = {}
        if name == "mamba2":
            self.inputs = {"A": rng.uniform(-2.0, -0.2, h),
                           "dt": rng.uniform(0.05, 1.0, (b, h, n))}

    def g(self, a, z):
        """The decay per token of tokens [a, z) by the example's formula."""
        if self.name == "simple_gla":
            return self.decay[..., a:z]
        if self.name == "mamba2":
            return (self.inputs["dt"][..., a:z]
                    * self.inputs["A"][None, :, None])
        h = np.arange(self.decay.shape[1])[None, :, None]
        return np.log(1 - 2.0 ** (-5.0 - h)) + 0 * self.decay[..., a:z]

    def mods(self, q, k, v, a, z):
        if self.name == "mamba2":
            return q, k, v * self.inputs["dt"][..., a:z, None]
        return q / np.sqrt(self.d), k, v

    def shard_inputs(self, a, z):
        return {"A": self.inputs["A"], "dt": self.inputs["dt"][..., a:z]} \
            if self.inputs else {}


def cuts(n, world, ragged):
    """Shard boundaries: equal, or ragged (the first shards shorter)."""
    if not ragged:
        return [n * r // world for r in range(world + 1)]
    lens = [max(1, (n // world) - 2 * (world - 1 - r)) for r in range(world)]
    lens[-1] += n - sum(lens)
    return [0] + list(np.cumsum(lens))


class DecayLog(unittest.TestCase):
    def test_examples(self):
        rng = np.random.default_rng(3)
        for name in ("simple_gla", "mamba2", "retention_linear"):
            ex = Example(name, rng, 2, 3, 11, 8)
            support = plan.linear_cp_support(ex.definition)
            g = plan.decay_log(support, F, ex.decay[..., 2:9],
                               ex.shard_inputs(2, 9), 2, 3, 8, np.arange)
            np.testing.assert_allclose(
                np.broadcast_to(g, (2, 3, 7)), ex.g(2, 9), rtol=1e-12,
                err_msg=name)

    def test_head_dim_and_batch_index(self):
        d = dsl.LinearAttentionDef("decay_of_b_and_d")
        d.decay_mod = lambda x, i, b, h, t: (
            dsl.maximum(x, -0.5) * i.head_dim().rsqrt() - 0.01 * b)
        support = plan.linear_cp_support(d.build())
        decay = np.linspace(-1.0, 0.0, 2 * 3 * 4).reshape(2, 3, 4)
        g = plan.decay_log(support, F, decay, {}, 2, 3, 16, np.arange)
        want = (np.maximum(decay, -0.5) / 4.0
                - 0.01 * np.arange(2)[:, None, None])
        np.testing.assert_allclose(g, want, rtol=1e-12)


class Scan(unittest.TestCase):
    """Every rank's output from its shard and the scanned initial state
    equals the whole sequence's recurrence."""

    def check(self, name, world, ragged, with_initial, scan=None):
        scan = scan or plan.initial_state
        rng = np.random.default_rng(world * 10 + ragged)
        b, h, n, d, dv = 2, 3, 23, 4, 5
        ex = Example(name, rng, b, h, n, d)
        support = plan.linear_cp_support(ex.definition)
        q, k = (rng.standard_normal((b, h, n, d)) for _ in range(2))
        v = rng.standard_normal((b, h, n, dv))
        init = (rng.standard_normal((b, h, d, dv)) if with_initial
                else np.zeros((b, h, d, dv)))
        whole_out, whole_final = recurrence(*ex.mods(q, k, v, 0, n),
                                            ex.g(0, n), init)
        bounds = cuts(n, world, ragged)
        transforms, finals = [], []
        for r in range(world):
            a, z = bounds[r], bounds[r + 1]
            start = init if r == 0 else np.zeros((b, h, d, dv))
            _, s = recurrence(*ex.mods(q[:, :, a:z], k[:, :, a:z],
                                       v[:, :, a:z], a, z), ex.g(a, z), start)
            g = plan.decay_log(support, F, ex.decay[..., a:z],
                               ex.shard_inputs(a, z), b, h, d, np.arange)
            transforms.append(np.exp(np.broadcast_to(g, (b, h, z - a))
                                     .sum(-1)))
            finals.append(s)
        errors = []
        for r in range(world):
            a, z = bounds[r], bounds[r + 1]
            state = scan(transforms, finals, r,
                         lambda t, s: t[..., None, None] * s)
            if state is None:
                state = init
            out, final = recurrence(*ex.mods(q[:, :, a:z], k[:, :, a:z],
                                             v[:, :, a:z], a, z),
                                    ex.g(a, z), state)
            errors.append(np.abs(out - whole_out[:, :, a:z]).max())
            if r == world - 1:
                errors.append(np.abs(final - whole_final).max())
        return max(errors)

    def test_examples(self):
        for name in ("simple_gla", "mamba2", "retention_linear"):
            for world in (1, 2, 3, 4):
                for ragged in (False, True):
                    for with_initial in (False, True):
                        err = self.check(name, world, ragged, with_initial)
                        self.assertLess(err, 1e-12, (name, world, ragged,
                                                     with_initial))

    def test_wrong_scan_is_caught(self):
        # Summing the earlier finals without the transforms between them.
        def no_decay(transforms, finals, rank, mul):
            return sum(finals[:rank]) if rank else None

        self.assertGreater(self.check("simple_gla", 3, True, False,
                                      no_decay), 1e-3)


class Refusals(unittest.TestCase):
    def refused(self, definition, says):
        with self.assertRaises(attnc.NotSupportedYet) as e:
            plan.linear_cp_support(definition, "where")
        self.assertIn(says, str(e.exception))
        self.assertTrue(str(e.exception).startswith("where: "))

    def test_token_index(self):
        d = dsl.LinearAttentionDef("decay_reads_t")
        d.decay_mod = lambda x, i, b, h, t: x + 0.001 * t
        self.refused(d.build(), "decay_mod reads the token index t")
        d = dsl.LinearAttentionDef("q_reads_t")
        d.q_mod = lambda x, i, b, h, t: x * (1.0 + 0.001 * t)
        self.refused(d.build(), "q_mod reads the token index t")

    def test_unknown_operation(self):
        d = dsl.LinearAttentionDef("decay_floordiv")
        d.decay_mod = lambda x, i, b, h, t: dsl.floordiv(x, 0.5)
        self.refused(d.build(), "uses 'floordiv'")

    def test_softmax_attention(self):
        self.refused(attnc.example("mha"), "is not linear attention")

    def test_supported(self):
        s = plan.linear_cp_support(attnc.example("mamba2"))
        self.assertEqual((s.token_inputs, s.shared_inputs), (("dt",),
                                                             ("A",)))
        s = plan.linear_cp_support(attnc.example("retention_linear"))
        self.assertEqual((s.token_inputs, s.shared_inputs), ((), ()))


if __name__ == "__main__":
    unittest.main()
