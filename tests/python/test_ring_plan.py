"""Ring attention's plan without torch or a GPU (attnc._ring_plan): the
zigzag and contiguous shards, which chunk pairs a ring step computes, the
key shards' and the dK/dV accumulators' trips around the ring, checked by
a host model in float64 (numpy) against attention over the whole
sequence, forward (parts merged by the log-sum-exp and sum rules) and
backward (per key shard, with the merged out and finals); and which
definitions are refused, with what."""

import json
import unittest

import numpy as np

import attnc
from attnc import _ring_plan as plan
from attnc import dsl
from attnc.dsl import InputShape


def alibi_positions():
    """Causal softmax with an ALiBi bias of positions given as per-token
    inputs (sharded with the sequence)."""
    d = dsl.AttentionDef("alibi_positions_plan")
    d.inputs.declare("slopes", InputShape.PerHead, 0.0, 0.5)
    d.inputs.declare("q_pos", InputShape.PerQueryToken, 0.0, 64.0)
    d.inputs.declare("k_pos", InputShape.PerKeyToken, 0.0, 64.0)
    d.score_mod = lambda s, i, b, h, qi, ki: (
        s * i.head_dim().rsqrt() + i["slopes"] * (i["k_pos"] - i["q_pos"]))
    d.mask_mod = dsl.masks.causal()
    d.online_func = dsl.online_softmax(False)
    return d.build()


class Layouts(unittest.TestCase):
    def test_zigzag_ranges(self):
        # 16 tokens over 2 ranks: chunks of 4, rank 0 holds 0 and 3.
        self.assertEqual(plan.shard_ranges("zigzag", 2, 0, 16),
                         [(0, 4), (12, 16)])
        self.assertEqual(plan.shard_ranges("zigzag", 2, 1, 16),
                         [(4, 8), (8, 12)])
        self.assertEqual(plan.shard_ranges("contiguous", 4, 3, 16),
                         [(12, 16)])

    def test_every_token_once(self):
        for layout in plan.LAYOUTS:
            for world in (1, 2, 3, 4, 8):
                n = plan.num_chunks(layout, world) * 3
                held = sorted(t for r in range(world)
                              for a, b in plan.shard_ranges(layout, world, r,
                                                            n)
                              for t in range(a, b))
                self.assertEqual(held, list(range(n)), (layout, world))

    def test_bad_layouts(self):
        with self.assertRaises(attnc.InvalidArgument) as e:
            plan.check_layout("w", "striped", 2, 16)
        self.assertIn("'striped' is not one of 'zigzag', 'contiguous'",
                      str(e.exception))
        with self.assertRaises(attnc.InvalidArgument) as e:
            plan.check_layout("w", "zigzag", 2, 18)
        self.assertIn("18 tokens does not cut into 4 equal chunks",
                      str(e.exception))
        with self.assertRaises(attnc.NotSupportedYet) as e:
            plan.check_layout("w", "zigzag", 9, 18 * 4)
        self.assertIn("9 ranks", str(e.exception))

    def test_zigzag_schedule(self):
        # Two ranks, chunk 4: rank 0 (chunks 0, 3) sees rank 1's (1, 2)
        # from its second chunk only; rank 1 sees rank 0's chunk 0 only.
        B = plan.Block
        self.assertEqual(plan.step_blocks("zigzag", 2, 0, 0, True, 4),
                         [B("causal", 0, 8, 0, 8)])
        self.assertEqual(plan.step_blocks("zigzag", 2, 0, 1, True, 4),
                         [B("full", 4, 8, 0, 8)])
        self.assertEqual(plan.step_blocks("zigzag", 2, 1, 0, True, 4),
                         [B("full", 0, 8, 0, 4)])
        self.assertEqual(plan.step_blocks("zigzag", 2, 1, 0, False, 4),
                         [B("full", 0, 8, 0, 8)])
        # Contiguous and causal: later shards are skipped.
        self.assertEqual(plan.step_blocks("contiguous", 4, 1, 2, True, 4),
                         [])

    def test_zigzag_balances_causal_work(self):
        for world in (2, 4, 8):
            work = []
            for r in range(world):
                w = 0
                for t in range(world):
                    for b in plan.step_blocks("zigzag", world, r,
                                              plan.source(r, t, world),
                                              True, 1):
                        area = (b.q1 - b.q0) * (b.k1 - b.k0)
                        w += area if b.kind == "full" else area / 2
                work.append(w)
            self.assertEqual(len(set(work)), 1, work)

    def test_forward_schedule(self):
        # Zigzag over 2 ranks, chunks of 4: rank 0's second chunk (3)
        # sees rank 1's shard whole, rank 1's both chunks (1, 2) see rank
        # 0's first chunk; contiguous: rank 0 sees nothing but its own.
        run = plan.MergeRun
        self.assertEqual(plan.forward_schedule("zigzag", 2, 0, True, 4).runs,
                         (run(4, 8, ((1, 0),)),))
        self.assertEqual(plan.forward_schedule("zigzag", 2, 1, True, 4).runs,
                         (run(0, 8, ((1, 0),)),))
        self.assertEqual(
            plan.forward_schedule("contiguous", 2, 0, True, 4).runs, ())
        self.assertEqual(
            plan.forward_schedule("zigzag", 4, 1, True, 4).runs,
            (run(0, 4, ((1, 0),)), run(4, 8, ((1, 0), (2, 0), (3, 0)))))

    def test_forward_schedule_merges_each_row_once(self):
        # Every row is in at most one run, whose parts are exactly the
        # blocks after step 0 that cover it; step 0 is one block of all
        # rows; the steps are step_blocks'.
        for layout in plan.LAYOUTS:
            for world in range(1, plan.MAX_WORLD + 1):
                for rank in range(world):
                    for causal in (False, True):
                        self.check_schedule(layout, world, rank, causal)

    def check_schedule(self, layout, world, rank, causal):
        chunk = 3
        s = plan.forward_schedule(layout, world, rank, causal, chunk)
        n = len(plan.rank_chunks(layout, world, rank)) * chunk
        for t, (src, blocks) in enumerate(s.steps):
            self.assertEqual(src, plan.source(rank, t, world))
            self.assertEqual(list(blocks), plan.step_blocks(
                layout, world, rank, src, causal, chunk))
        self.assertEqual([(b.q0, b.q1) for b in s.steps[0][1]], [(0, n)])
        for x in range(n):
            cover = {(t, i) for t, (_, blocks) in enumerate(s.steps) if t
                     for i, b in enumerate(blocks) if b.q0 <= x < b.q1}
            runs = [r for r in s.runs if r.a <= x < r.b]
            self.assertLessEqual(len(runs), 1)
            self.assertEqual(set(runs[0].parts) if runs else set(), cover,
                             f"{layout} W{world} rank {rank} row {x}")
            if runs:
                self.assertEqual(len(runs[0].parts), len(cover))
                self.assertLessEqual(len(cover) + 1, plan.MAX_WORLD)


# -- the host model -----------------------------------------------------------

SCALE = 0.25


def scores(q, k, mq, mk, causal, alibi, pq, pk):
    """Scaled scores; the mask reads the call's indices mq, mk (local ones
    for a masked ring block), the ALiBi bias the position inputs pq, pk."""
    s = q @ k.T * SCALE
    if alibi is not None:
        s = s + alibi * (pk[None, :] - pq[:, None])
    if causal:
        s = np.where(mq[:, None] >= mk[None, :], s, -np.inf)
    return s


def forward(kind, q, k, v, s):
    """(o, finals [1, rows] or [0, rows]) of one block in float64."""
    if kind == "softmax":
        m = s.max(axis=1, keepdims=True)
        with np.errstate(invalid="ignore"):
            p = np.where(np.isfinite(s), np.exp(s - m), 0.0)
        r = p.sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            o = np.where(r > 0, (p @ v) / r, 0.0)
            lse = np.where(r[:, 0] > 0, np.log(r[:, 0]) + m[:, 0], -np.inf)
        return o, lse[None, :]
    p = np.where(np.isfinite(s), 1 / (1 + np.exp(-(s + BIAS))), 0.0)
    return p @ v, np.zeros((0, q.shape[0]))


BIAS = -1.0


def merge(kind, parts):
    """The merge kernel's rule (analysis::mergeResults): log-sum-exp
    weights, or a sum; a part whose first final is -inf is skipped."""
    o = np.zeros_like(parts[0][0])
    fin = np.full_like(parts[0][1], -np.inf)
    for po, pf in parts:
        seen = pf[0] > -np.inf if len(pf) else np.ones(len(po), bool)
        if kind == "softmax":
            lse = np.logaddexp(fin[0], np.where(seen, pf[0], -np.inf))
            with np.errstate(invalid="ignore"):
                wa = np.where(fin[0] > -np.inf, np.exp(fin[0] - lse), 0.0)
                wb = np.where(seen, np.exp(pf[0] - lse), 0.0)
            o = wa[:, None] * o + wb[:, None] * np.where(seen[:, None], po,
                                                          0.0)
            fin = lse[None, :]
        else:
            o = o + np.where(seen[:, None], po, 0.0)
    return o, fin


def backward(kind, q, k, v, o, do, fin, s):
    """dq, dk, dv of one block from the merged (global) o and finals: the
    rows' quantities are the whole sequence's, so a block's gradients are
    its share of the whole's."""
    dp = do @ v.T
    if kind == "softmax":
        with np.errstate(invalid="ignore"):
            p = np.where(np.isfinite(s), np.exp(s - fin[0][:, None]), 0.0)
        ds = p * (dp - (do * o).sum(axis=1, keepdims=True))
    else:
        p = np.where(np.isfinite(s), 1 / (1 + np.exp(-(s + BIAS))), 0.0)
        ds = dp * p * (1 - p)
    return ds @ k * SCALE, ds.T @ q * SCALE, p.T @ do


def ring(kind, layout, world, q, k, v, do, causal, alibi=None,
         schedule=plan.forward_schedule, backward_rows=None):
    """Ring attention in float64, rank by rank and step by step as
    attnc.distributed runs it (schedule: the plan; its steps' blocks, step
    0's result written directly, the other blocks' results over their own
    rows merged into it run by run; backward_rows: the backward's blocks
    cut by plan.backward_blocks at that many rows): the global out, dq, dk,
    dv."""
    n, d_v = len(q), v.shape[1]
    chunk = plan.check_layout("test", layout, world, n)
    idx = [np.concatenate([np.arange(a, b) for a, b in
                           plan.shard_ranges(layout, world, r, n)])
           for r in range(world)]

    def block_scores(r, src, b):
        qi, ki = idx[r][b.q0:b.q1], idx[src][b.k0:b.k1]
        # A masked call sees its own (local) indices; the per-token
        # position inputs travel with their shards.
        return qi, ki, scores(q[qi], k[ki], np.arange(b.q0, b.q1),
                              np.arange(b.k0, b.k1), b.kind == "causal",
                              alibi, qi.astype(float), ki.astype(float))

    outs, fins, scheds = [], [], []
    for r in range(world):
        sched = schedule(layout, world, r, causal, chunk)
        scheds.append(sched)
        parts = {}
        for t, (src, blocks) in enumerate(sched.steps):
            for i, b in enumerate(blocks):
                qi, ki, s = block_scores(r, src, b)
                po, pf = forward(kind, q[qi], k[ki], v[ki], s)
                if t == 0:  # every row (forward_schedule checks it)
                    o, f = po.copy(), pf.copy()
                else:
                    parts[t, i] = (b.q0, po, pf)
        for run in sched.runs:
            here = [(o[run.a:run.b], f[:, run.a:run.b])]
            for key in run.parts:
                q0, po, pf = parts[key]
                here.append((po[run.a - q0:run.b - q0],
                             pf[:, run.a - q0:run.b - q0]))
            o[run.a:run.b], f[:, run.a:run.b] = merge(kind, here)
        outs.append(o)
        fins.append(f)
    dq = [np.zeros((len(i), q.shape[1])) for i in idx]
    # acc[r]: the (dk, dv) accumulator rank r holds, of its current source.
    acc = [(np.zeros((len(idx[r]), k.shape[1])), np.zeros((len(idx[r]), d_v)))
           for r in range(world)]
    for t in range(world):
        for r in range(world):
            src, blocks = scheds[r].steps[t]
            if backward_rows is not None:
                blocks = plan.backward_blocks(blocks, backward_rows)
            for b in blocks:
                qi, ki, s = block_scores(r, src, b)
                gq, gk, gv = backward(
                    kind, q[qi], k[ki], v[ki], outs[r][b.q0:b.q1],
                    do[qi], fins[r][:, b.q0:b.q1], s)
                dq[r][b.q0:b.q1] += gq
                acc[r][0][b.k0:b.k1] += gk
                acc[r][1][b.k0:b.k1] += gv
        # Every accumulator moves one rank on, with its key shard; after
        # the last step's move each is back with its owner.
        acc = [acc[(r - 1) % world] for r in range(world)]
    out, gq, gk, gv = (np.zeros_like(x) for x in (v, q, k, v))
    for r in range(world):
        out[idx[r]], gq[idx[r]] = outs[r], dq[r]
        gk[idx[r]], gv[idx[r]] = acc[r]
    return out, gq, gk, gv


class BackwardPieces(unittest.TestCase):
    def test_cuts(self):
        b = plan.Block("causal", 0, 65536, 0, 65536)
        self.assertEqual(plan.backward_blocks([b]), [
            plan.Block("causal", 0, 32768, 0, 32768),
            plan.Block("causal", 32768, 65536, 32768, 65536),
            plan.Block("full", 32768, 65536, 0, 32768)])
        # Up to the bound, and blocks that are not square causal ones, as
        # they are.
        same = [plan.Block("causal", 0, 32768, 0, 32768),
                plan.Block("full", 0, 65536, 0, 65536),
                plan.Block("causal", 0, 65536, 0, 40000)]
        self.assertEqual(plan.backward_blocks(same), same)
        # 100,000 rows: four pieces, cut on multiples of 128.
        got = plan.backward_blocks([plan.Block("causal", 0, 100000, 0,
                                               100000)])
        self.assertEqual([(x.kind, x.q0, x.q1, x.k0, x.k1) for x in got], [
            ("causal", 0, 24960, 0, 24960),
            ("causal", 24960, 49920, 24960, 49920),
            ("full", 24960, 49920, 0, 24960),
            ("causal", 49920, 74880, 49920, 74880),
            ("full", 49920, 74880, 0, 49920),
            ("causal", 74880, 100000, 74880, 100000),
            ("full", 74880, 100000, 0, 74880)])

    def test_every_causal_pair_once(self):
        for n in (1, 5, 9, 130, 300):
            for rows in (1, 2, 4, 64, 129):
                seen = np.zeros((n, n), int)
                for x in plan.backward_blocks(
                        [plan.Block("causal", 0, n, 0, n)], rows):
                    self.assertLessEqual(x.q1 - x.q0, max(rows, 1) * 2)
                    for i in range(x.q0, x.q1):
                        for j in range(x.k0, x.k1):
                            if x.kind == "full" or i - x.q0 >= j - x.k0:
                                seen[i, j] += 1
                want = np.tril(np.ones((n, n), int))
                np.testing.assert_array_equal(seen, want,
                                              err_msg=f"n {n} rows {rows}")


class HostModel(unittest.TestCase):
    def run_both(self, kind, layout, world, causal, alibi=None, **kw):
        rng = np.random.default_rng(world * 10 + causal)
        n = plan.num_chunks(layout, world) * 5
        q, k = (rng.standard_normal((n, 8)) for _ in range(2))
        v, do = (rng.standard_normal((n, 6)) for _ in range(2))
        pos = np.arange(n)
        s = scores(q, k, pos, pos, causal, alibi, pos, pos)
        want_o, want_f = forward(kind, q, k, v, s)
        want = (want_o,) + backward(kind, q, k, v, want_o, do, want_f, s)
        return ring(kind, layout, world, q, k, v, do, causal, alibi,
                    **kw), want

    def check(self, kind, layout, world, causal, alibi=None):
        got, want = self.run_both(kind, layout, world, causal, alibi)
        for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
            np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-11,
                                       err_msg=f"{kind} {layout} W{world} "
                                       f"causal={causal} {name}")

    def test_softmax(self):
        for layout in plan.LAYOUTS:
            for world in (1, 2, 3, 4):
                for causal in (False, True):
                    self.check("softmax", layout, world, causal)

    def test_backward_of_a_long_causal_block_in_pieces(self):
        # The own shard's causal block cut into square pieces and the full
        # blocks below them: the same gradients.
        for kind in ("softmax", "sigmoid"):
            for layout in plan.LAYOUTS:
                for world in (1, 2, 3):
                    for rows in (1, 3, 4, 7):
                        got, want = self.run_both(kind, layout, world, True,
                                                  backward_rows=rows)
                        for name, g, w in zip(("dq", "dk", "dv"), got[1:],
                                              want[1:]):
                            np.testing.assert_allclose(
                                g, w, rtol=1e-11, atol=1e-11,
                                err_msg=f"{kind} {layout} W{world} rows "
                                f"{rows} {name}")

    def test_sigmoid_sums(self):
        for layout in plan.LAYOUTS:
            for world in (2, 4):
                for causal in (False, True):
                    self.check("sigmoid", layout, world, causal)

    def test_alibi_of_position_inputs(self):
        for world in (2, 4):
            self.check("softmax", "zigzag", world, True, alibi=0.3)

    def test_the_mask_on_local_indices_is_wrong_off_the_diagonal(self):
        # Why off-diagonal blocks run the maskless twin: the same blocks run
        # with the causal mask on their local indices differ from the whole
        # (the model is not blind to a wrong plan).
        def masked_everywhere(layout, world, rank, causal, chunk):
            s = plan.forward_schedule(layout, world, rank, causal, chunk)
            return s._replace(steps=tuple(
                (src, tuple(b._replace(kind="causal") for b in blocks))
                for src, blocks in s.steps))

        got, want = self.run_both("softmax", "zigzag", 2, True,
                                  schedule=masked_everywhere)
        self.assertGreater(np.abs(got[0] - want[0]).max(), 1e-3)

    def test_a_run_without_one_of_its_parts_is_wrong(self):
        # The merge runs must name every part of their rows (the model
        # sees a run that leaves one out).
        def one_short(layout, world, rank, causal, chunk):
            s = plan.forward_schedule(layout, world, rank, causal, chunk)
            return s._replace(runs=tuple(
                r._replace(parts=r.parts[:-1]) for r in s.runs))

        for layout in plan.LAYOUTS:
            got, want = self.run_both("softmax", layout, 3, True,
                                      schedule=one_short)
            self.assertGreater(np.abs(got[0] - want[0]).max(), 1e-3)


class Definitions(unittest.TestCase):
    def test_supported(self):
        s = plan.ring_support(attnc.example("mha"))
        self.assertEqual(s.mask, "causal")
        self.assertEqual(plan.ring_support(attnc.example("relu_attn")).mask,
                         "none")
        s = plan.ring_support(attnc.example("sigmoid_attn"))
        self.assertEqual((s.mask, s.shared_inputs),
                         ("causal", ("softmax_bias",)))
        s = plan.ring_support(alibi_positions())
        self.assertEqual((s.mask, s.query_inputs, s.key_inputs,
                          s.shared_inputs),
                         ("causal", ("q_pos",), ("k_pos",), ("slopes",)))

    def test_positions(self):
        # Masks and score_mods that read positions otherwise than causal:
        # the positioned twin runs them (test_ring_positions.py).
        for name in ("mha_sliding_window", "mha_document", "mha_prefix_lm",
                     "alibi_learnable"):
            self.assertEqual(plan.ring_support(attnc.example(name)).mask,
                             "positions", name)
        s = plan.ring_support(attnc.example("mha_document"))
        self.assertEqual((s.query_inputs, s.key_inputs),
                         (("q_doc",), ("k_doc",)))
        self.assertEqual(plan.ring_support(attnc.example(
            "alibi_learnable")).grad_inputs, ("slopes", "head_bias"))

    def test_refused(self):
        for name, says in (
                ("simple_gla", "is linear attention; its state passes "
                 "across ranks with attnc.distributed.linear_attention_cp"),):
            with self.assertRaises(attnc.NotSupportedYet, msg=name) as e:
                plan.ring_support(attnc.example(name))
            self.assertIn(says, str(e.exception))

    def test_maskless_twin(self):
        mha = attnc.example("mha")
        twin = plan.maskless_twin(mha)
        self.assertEqual(twin.name, "mha__ring_nomask")
        graph = json.loads(twin.ir_json())
        self.assertFalse(graph["has_mask"])
        self.assertNotIn("mask_mod", [f["name"] for f in graph["functions"]])
        self.assertEqual(plan.ring_support(twin).mask, "none")
        # The rest is the definition's own: the same online function and
        # score_mod, so the same kernel but for the mask.
        source = json.loads(mha.ir_json())
        self.assertEqual(graph["rowscales"], source["rowscales"])
        self.assertEqual(graph["finals"], source["finals"])
        self.assertIn("func mask_mod", mha.ir(after="dce"))
        self.assertNotIn("func mask_mod", twin.ir())


if __name__ == "__main__":
    unittest.main()
