"""Linear attention across ranks without torch or a GPU
(attnc._linear_cp_plan): the decay_mod and q_mod evaluated over a shard
against formulas (floordiv and mod among the operations); the one-pass
scheme in a float64 host model — every shard run from a zero state, the
scan of per-rank state transforms, the passed state's contribution added,
and backward the reverse scan to each rank's final-state gradient, one
local backward with it and the contribution's gradients — against the
whole-sequence recurrence and its adjoint (itself checked by finite
differences): out, final state and the gradients of q, k, v, the decay,
mamba2's dt and A and the initial state, W = 1 to 4, equal and ragged
shards, with and without an initial state; wrong models (no contribution,
a reverse scan without the transforms, no transform gradient, a scan
without the transforms) that it catches; and which definitions are
refused, with what."""

import json
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


def recurrence_grad(q, k, v, g, state, dout, dfinal):
    """The adjoint of recurrence for the loss Σ dout·out + Σ dfinal·final:
    (dq, dk, dv, dg, d initial state), all float64."""
    states = [state]
    for t in range(q.shape[2]):
        states.append(np.exp(g[:, :, t])[..., None, None] * states[-1]
                      + k[:, :, t, :, None] * v[:, :, t, None, :])
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    dg = np.zeros(g.shape)
    ds = dfinal.copy()
    for t in range(q.shape[2] - 1, -1, -1):
        ds = ds + q[:, :, t, :, None] * dout[:, :, t, None, :]
        dq[:, :, t] = np.einsum("bhde,bhe->bhd", states[t + 1],
                                dout[:, :, t])
        dk[:, :, t] = np.einsum("bhde,bhe->bhd", ds, v[:, :, t])
        dv[:, :, t] = np.einsum("bhde,bhd->bhe", ds, k[:, :, t])
        decay = np.exp(g[:, :, t])
        dg[:, :, t] = decay * (ds * states[t]).sum((-1, -2))
        ds = decay[..., None, None] * ds
    return dq, dk, dv, dg, ds


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

    def unmod(self, grads, v, a, z):
        """The gradients of the mods' inputs from those of their outputs:
        {"dq", "dk", "dv", and "ddecay" or "ddt" and "dA"} of tokens [a, z)
        (dA partial: a sum over the shard)."""
        dq, dk, dv, dg = grads
        if self.name == "mamba2":
            dt = self.inputs["dt"][..., a:z]
            a_head = self.inputs["A"][None, :, None]
            return {"dq": dq, "dk": dk, "dv": dv * dt[..., None],
                    "ddt": (dv * v).sum(-1) + dg * a_head,
                    "dA": (dg * dt).sum((0, 2))}
        out = {"dq": dq / np.sqrt(self.d), "dk": dk, "dv": dv}
        if self.name == "simple_gla":
            out["ddecay"] = dg
        return out


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

    def test_floordiv_and_mod(self):
        # Rounded towards -inf like the kernels' floordiv / floormod, on
        # f32 and on i32 (the head index).
        d = dsl.LinearAttentionDef("decay_floor")
        d.decay_mod = lambda x, i, b, h, t: (
            dsl.floordiv(x, 0.25) * 0.1 + dsl.mod(x, 0.3)
            + dsl.floordiv(h - 1, 2) * 0.01 + dsl.mod(h - 1, 2) * 0.001)
        support = plan.linear_cp_support(d.build())
        decay = np.linspace(-1.0, 0.0, 2 * 3 * 5).reshape(2, 3, 5)
        g = plan.decay_log(support, F, decay, {}, 2, 3, 8, np.arange)
        hm = np.arange(3)[None, :, None] - 1
        want = (np.floor(decay / 0.25) * 0.1 + (decay - 0.3 * np.floor(
            decay / 0.3)) + (hm // 2) * 0.01 + (hm % 2) * 0.001)
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-15)

    def test_q_mod(self):
        # A scale of q: its factors, per token; any other q_mod evaluated
        # on q itself.
        scaled = dsl.LinearAttentionDef("q_scaled")
        scaled.inputs.declare("qs", InputShape.PerRow, 0.5, 1.5)
        scaled.inputs.declare("w", InputShape.PerHead, 0.5, 1.5)
        scaled.q_mod = lambda x, i, b, h, t: (
            i["qs"] * (x / i["w"]) * i.head_dim().rsqrt())
        feature = dsl.LinearAttentionDef("q_feature")
        feature.inputs.declare("w", InputShape.PerHead, 0.5, 1.5)
        feature.q_mod = lambda x, i, b, h, t: (
            x.sigmoid() * i["w"] + 0.01 * b - dsl.maximum(x, 0.5))
        rng = np.random.default_rng(4)
        qs, w = rng.uniform(0.5, 1.5, (2, 3, 7)), rng.uniform(0.5, 1.5, 3)
        q = rng.standard_normal((2, 3, 7, 16))
        ins = {"qs": qs, "w": w}
        support = plan.linear_cp_support(scaled.build())
        self.assertEqual(len(support.q_scale), 3)
        scale = plan.q_scale(support, F, ins, 2, 3, 16, np.arange)
        np.testing.assert_allclose(np.broadcast_to(scale, (2, 3, 7)),
                                   qs / w[None, :, None] / 4.0, rtol=1e-12)
        support = plan.linear_cp_support(feature.build())
        self.assertIsNone(support.q_scale)
        got = plan.q_mod_values(support, F, q, ins, 2, 3, 16, np.arange)
        want = (1 / (1 + np.exp(-q)) * w[None, :, None, None]
                + 0.01 * np.arange(2)[:, None, None, None]
                - np.maximum(q, 0.5))
        np.testing.assert_allclose(got, want, rtol=1e-12)
        for name, form in (("simple_gla", 1), ("mamba2", 0),
                           ("retention_linear", 1)):
            support = plan.linear_cp_support(attnc.example(name))
            self.assertEqual(len(support.q_scale), form, name)

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


def mul(a, s):
    """A shard's transform applied to a state."""
    return a[..., None, None] * s


def scan_without_transforms(transforms, finals, rank, mul):
    """A wrong scan: the earlier finals summed, not decayed between."""
    return sum(finals[:rank]) if rank else None


def reverse_scan_without_transforms(transforms, dstates_in, rank, mul):
    """A wrong reverse scan: the later ranks' dS_in summed."""
    later = dstates_in[rank + 1:]
    return sum(later) if later else None


class OnePass(unittest.TestCase):
    """The one-pass scheme, forward and backward, in float64 on the host:
    every rank's output, the last rank's final state and every gradient
    equal the whole sequence's."""

    def check(self, name, world, ragged, with_initial, wrong=None):
        """The largest error, relative to the largest reference value of
        its quantity. wrong names a deliberately broken step."""
        rng = np.random.default_rng(world * 10 + ragged)
        b, h, n, d, dv = 2, 3, 23, 4, 5
        ex = Example(name, rng, b, h, n, d)
        support = plan.linear_cp_support(ex.definition)
        q, k = (rng.standard_normal((b, h, n, d)) for _ in range(2))
        v, dout = (rng.standard_normal((b, h, n, dv)) for _ in range(2))
        dfinal = rng.standard_normal((b, h, d, dv))
        zero = np.zeros((b, h, d, dv))
        init = rng.standard_normal((b, h, d, dv)) if with_initial else zero
        # The whole sequence.
        mods = ex.mods(q, k, v, 0, n)
        whole_out, whole_final = recurrence(*mods, ex.g(0, n), init)
        whole_grads = recurrence_grad(*mods, ex.g(0, n), init, dout, dfinal)
        whole = ex.unmod(whole_grads[:4], v, 0, n)
        whole["dinit"] = whole_grads[4]
        bounds = cuts(n, world, ragged)
        shards = [(bounds[r], bounds[r + 1]) for r in range(world)]
        # Forward, every rank at once: its shard from a zero state (rank 0
        # from the initial state), then the exchange of (S_r, A_r).
        local, transforms, finals, cums, scales = [], [], [], [], []
        for r, (a, z) in enumerate(shards):
            start = init if r == 0 else zero
            local.append(recurrence(*ex.mods(q[:, :, a:z], k[:, :, a:z],
                                             v[:, :, a:z], a, z),
                                    ex.g(a, z), start))
            g = np.broadcast_to(plan.decay_log(
                support, F, ex.decay[..., a:z], ex.shard_inputs(a, z), b, h,
                d, np.arange), (b, h, z - a))
            cum = np.cumsum(g, -1)
            transforms.append(np.exp(cum[..., -1]))
            finals.append(local[-1][1])
            cums.append(cum)
            scale = plan.q_scale(support, F, ex.shard_inputs(a, z), b, h, d,
                                 np.arange)
            scales.append(np.exp(cum) * (1.0 if scale is None else scale))
        scan = (scan_without_transforms if wrong == "scan without transforms"
                else plan.initial_state)
        states = [scan(transforms, finals, r, mul) for r in range(world)]
        states = [zero if s is None else s for s in states]
        errors = []

        def compare(got, want):
            errors.append(np.abs(got - want).max()
                          / max(np.abs(want).max(), 1e-300))

        # The passed state's contribution (none on rank 0, whose run started
        # from the sequence's initial state).
        products = [np.einsum("bhtd,bhde->bhte", q[:, :, a:z], states[r])
                    for r, (a, z) in enumerate(shards)]
        for r, (a, z) in enumerate(shards):
            out = local[r][0]
            if r > 0 and wrong != "no contribution":
                out = out + scales[r][..., None] * products[r]
            compare(out, whole_out[:, :, a:z])
        last = world - 1
        compare(mul(transforms[last], states[last]) + finals[last]
                if last > 0 else finals[last], whole_final)
        # Backward: each rank's dS_in (the contribution's, and the last
        # rank's final state's), exchanged and scanned back.
        dstates = []
        for r, (a, z) in enumerate(shards):
            ds = np.einsum("bht,bhtd,bhte->bhde", scales[r], q[:, :, a:z],
                           dout[:, :, a:z]) if r > 0 else zero.copy()
            if r == last and r > 0:
                ds = ds + mul(transforms[r], dfinal)
            dstates.append(ds)
        back = (reverse_scan_without_transforms
                if wrong == "reverse scan without transforms"
                else plan.final_state_grad)
        got = {key: [] for key in whole}
        for r, (a, z) in enumerate(shards):
            dlocal = back(transforms, dstates, r, mul)
            dlocal = zero if dlocal is None else dlocal
            # dA_r = <dS_r, S_in(r)> (+ the final state's on the last rank)
            dtransform = (dlocal * states[r]).sum((-1, -2))
            if r == last:
                if r > 0:
                    dtransform = dtransform + (dfinal * states[r]).sum(
                        (-1, -2))
                dlocal = dlocal + dfinal
            mods = ex.mods(q[:, :, a:z], k[:, :, a:z], v[:, :, a:z], a, z)
            dq, dk, dv, dg, dinit = recurrence_grad(
                *mods, ex.g(a, z), init if r == 0 else zero,
                dout[:, :, a:z], dlocal)
            if wrong != "no transform gradient":
                dg = dg + (dtransform * transforms[r])[..., None]
            grads = ex.unmod((dq, dk, dv, dg), v[:, :, a:z], a, z)
            if r > 0:
                # The contribution's: d(raw q) and dG (the scale is
                # exp(G)·Π f, Π f constant here), dG_t reaching every g_s
                # with s <= t.
                grads["dq"] = grads["dq"] + scales[r][..., None] * np.einsum(
                    "bhte,bhde->bhtd", dout[:, :, a:z], states[r])
                dscale = (dout[:, :, a:z] * products[r]).sum(-1)
                dcum = dscale * scales[r]
                dg_extra = np.cumsum(dcum[..., ::-1], -1)[..., ::-1]
                extra = ex.unmod((0, 0, 0, dg_extra), 0 * v[:, :, a:z], a, z)
                for key in ("ddecay", "ddt", "dA"):
                    if key in grads:
                        grads[key] = grads[key] + extra[key]
            grads["dinit"] = dinit if r == 0 else zero
            for key in whole:
                got[key].append(grads[key])
        for key, want in whole.items():
            if key in ("dA", "dinit"):  # sums over the ranks
                compare(sum(got[key]), want)
            else:
                compare(np.concatenate(got[key], -1 if key == "ddt" or
                                       key == "ddecay" else 2), want)
        return max(errors)

    def test_examples(self):
        for name in ("simple_gla", "mamba2", "retention_linear"):
            for world in (1, 2, 3, 4):
                for ragged in (False, True):
                    for with_initial in (False, True):
                        err = self.check(name, world, ragged, with_initial)
                        self.assertLess(err, 1e-12, (name, world, ragged,
                                                     with_initial))

    def test_wrong_models_are_caught(self):
        for wrong in ("no contribution", "scan without transforms",
                      "reverse scan without transforms",
                      "no transform gradient"):
            for name in ("simple_gla", "mamba2"):
                self.assertGreater(self.check(name, 3, True, True, wrong),
                                   1e-3, (wrong, name))

    def test_adjoint_against_finite_differences(self):
        rng = np.random.default_rng(5)
        b, h, n, d, dv = 1, 2, 6, 3, 2
        q, k = (rng.standard_normal((b, h, n, d)) for _ in range(2))
        v, dout = (rng.standard_normal((b, h, n, dv)) for _ in range(2))
        g = rng.uniform(-1.0, 0.0, (b, h, n))
        init, dfinal = (rng.standard_normal((b, h, d, dv))
                        for _ in range(2))
        args = [q, k, v, g, init]

        def loss(xs):
            out, final = recurrence(*xs)
            return (out * dout).sum() + (final * dfinal).sum()

        grads = recurrence_grad(*args, dout, dfinal)
        eps = 1e-6
        for i, x in enumerate(args):
            for idx in list(np.ndindex(x.shape))[::3]:
                plus = [a.copy() for a in args]
                minus = [a.copy() for a in args]
                plus[i][idx] += eps
                minus[i][idx] -= eps
                numeric = (loss(plus) - loss(minus)) / (2 * eps)
                self.assertAlmostEqual(grads[i][idx], numeric, delta=1e-6,
                                       msg=(i, idx))


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
        # Every operation a linear mod can trace is known; a graph with
        # another (as a newer IR might hold) is refused by name.
        graph = json.loads(attnc.example("simple_gla").ir_json())
        nodes = graph["nodes"]
        nodes.append(nodes[6])  # the decay, read by the unknown one
        nodes[6] = {"op": "frobnicate", "args": [len(nodes) - 1],
                    "space": "row", "type": "f32"}

        class Graph:
            def ir_json(self):
                return json.dumps(graph)

        self.refused(Graph(), "its decay_mod uses 'frobnicate'")

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
