"""Ring attention for masks that read positions (attnc._ring_positions),
without torch or a GPU: the positioned twin's IR (q_idx + ring_q_offset,
kv_idx + ring_kv_offset; input loads unchanged) evaluated point by point
against the definition at global positions; the interval classification
of position boxes against every element (empty boxes keep none, full ones
mask none); each ring step's blocks and travelling key ranges against the
whole sequence's mask (every kept element in exactly one block, nothing
read outside what travels); and a float64 host model of the ring, forward
(log-sum-exp merge) and backward (per block with the merged out and
finals), equal to attention over the whole sequence for a sliding window,
a document mask and prefix-LM on both layouts. The twins compile with
NVRTC for sm_80 and sm_90a, forward and backward."""

import json
import unittest

import numpy as np

import attnc
from attnc import _ring_plan as plan
from attnc import _ring_positions as pos
from attnc import dsl
from test_ring_plan import backward, forward, merge

SCALE = 0.25
WINDOWS = {"mha_sliding_window": 256, "window5": 5}
_graphs = {}


def graph(name):
    """The IR of an example, or of "window5": a sliding window of 5 keys,
    which small sequences see the ends of."""
    if name not in _graphs:
        if name == "window5":
            d = dsl.AttentionDef("ring_window5")
            d.score_mod = dsl.score_mods.scaled()
            d.mask_mod = dsl.masks.sliding_window(5)
            d.online_func = dsl.online_softmax()
            d = d.build()
        else:
            d = attnc.example(name)
        _graphs[name] = json.loads(d.ir_json())
    return _graphs[name]


def whole_mask(name, qp, kp, values):
    """The example's mask at global positions qp x kp, in numpy."""
    causal = qp[:, None] >= kp[None, :]
    if name in WINDOWS:
        return causal & (qp[:, None] - kp[None, :] < WINDOWS[name])
    if name == "mha_document":
        return causal & (values["q_doc"][qp][:, None] ==
                         values["k_doc"][kp][None, :])
    if name == "mha_prefix_lm":
        return causal | (kp[None, :] < values["prefix_len"])
    raise KeyError(name)


def point(g, qi, ki, values):
    """The mask of graph g at one element (exact: every input known)."""
    got = pos.classify_box(g, pos.mask_root(g), qi, qi, ki, ki, values)
    assert got in ("full", "empty"), got
    return got == "full"


def case_values(name, n, rng):
    """Inputs of a case over n tokens: document ids in runs, a prefix."""
    if name == "mha_document":
        ids = np.cumsum(rng.random(n) < 0.15).astype(float)
        return {"q_doc": ids, "k_doc": ids}
    if name == "mha_prefix_lm":
        return {"prefix_len": 7}
    return {}


MASKS = ("window5", "mha_sliding_window", "mha_document", "mha_prefix_lm")


class Twin(unittest.TestCase):
    def test_positioned_graph(self):
        rng = np.random.default_rng(3)
        for name in MASKS:
            g = graph(name)
            t = pos.positioned_graph(g)
            self.assertEqual(t["name"], g["name"] + pos.POSITIONS_SUFFIX)
            self.assertEqual([(d["name"], d["shape"], d["type"])
                              for d in t["inputs"][-2:]],
                             [(pos.Q_OFFSET, "scalar", "i32"),
                              (pos.KV_OFFSET, "scalar", "i32")])
            values = case_values(name, 1200, rng)
            for _ in range(300):
                qo, ko = (int(x) for x in rng.integers(0, 600, 2))
                qi, ki = (int(x) for x in rng.integers(0, 600, 2))
                # Input loads stay at the call's (local) indices.
                local = {n: (float(v[qi]),) * 2 if n == "q_doc" else
                         (float(v[ki]),) * 2 if n == "k_doc" else (v, v)
                         for n, v in values.items()}
                glob = {n: (float(v[qi]),) * 2 if n == "q_doc" else
                        (float(v[ki]),) * 2 if n == "k_doc" else (v, v)
                        for n, v in values.items()}
                local.update({pos.Q_OFFSET: (qo, qo), pos.KV_OFFSET: (ko, ko)})
                self.assertEqual(point(t, qi, ki, local),
                                 point(g, qi + qo, ki + ko, glob),
                                 (name, qi, ki, qo, ko))

    def test_taken_names_refused(self):
        g = graph("mha_sliding_window")
        g = pos.positioned_graph(g)
        with self.assertRaises(attnc.UserError) as e:
            pos.positioned_graph(g)
        self.assertIn("declares an input named 'ring_q_offset'",
                      str(e.exception))

    def test_twins_compile(self):
        # The kernels the ring runs: the positioned twin (a masked pair)
        # and its maskless twin (a pair the mask keeps whole).
        window = pos.positioned_twin(attnc.example("mha_sliding_window"))
        document = pos.positioned_twin(attnc.example("mha_document"))
        for d, arch, bwd in ((window, "sm_80", False), (window, "sm_80", True),
                             (window, "sm_90a", False),
                             (window, "sm_90a", True),
                             (document, "sm_90a", False),
                             (document, "sm_90a", True),
                             (plan.maskless_twin(document), "sm_90a", True)):
            got = d.compile(arch=arch, head_dim=128, backward=bwd)
            self.assertIn(d.name, got["kernel"], (arch, bwd))
        src = pos.positioned_twin(attnc.example("mha_sliding_window")).emit(
            arch="sm_90a", head_dim=128)
        # The offsets are kernel arguments, also in the box classification.
        self.assertIn("(q_idx + in.in_0_ring_q_offset)", src)
        self.assertIn("kMaskAnalysed = true", src)
        self.assertIn("mb_i(in.in_1_ring_kv_offset)", src)

    def test_ring_support(self):
        for name in MASKS[1:] + ("alibi_learnable",):
            self.assertEqual(plan.ring_support(attnc.example(name)).mask,
                             "positions", name)
        self.assertEqual(plan.ring_support(attnc.example("mha")).mask,
                         "causal")


class Boxes(unittest.TestCase):
    def test_sound_on_every_element(self):
        rng = np.random.default_rng(5)
        for name in MASKS:
            g = graph(name)
            values = case_values(name, 64, rng)
            scalars = {n: v for n, v in values.items()
                       if not isinstance(v, np.ndarray)}
            boxes = pos.MaskBoxes(g, scalars)
            if name == "mha_document":  # its ids bound per tile of 4
                boxes = boxes_of(name, values, 4)
            qp = kp = np.arange(64)
            m = whole_mask(name, qp, kp, values)
            seen = set()
            for _ in range(400):
                q0, q1 = sorted(int(x) for x in rng.integers(0, 64, 2))
                k0, k1 = sorted(int(x) for x in rng.integers(0, 64, 2))
                got = boxes(q0, q1, k0, k1)
                seen.add(got)
                sub = m[q0:q1 + 1, k0:k1 + 1]
                if got == "empty":
                    self.assertFalse(sub.any(), (name, q0, q1, k0, k1))
                if got == "full":
                    self.assertTrue(sub.all(), (name, q0, q1, k0, k1))
            self.assertIn("empty", seen, name)


def boxes_of(name, values, bound_tile=None):
    """The mask's boxes with the case's scalars and, with bound_tile, the
    bounds of its per-token inputs per tile of positions (as the ring
    all-reduces them from the shards)."""
    g = graph(name)
    scalars = {n: v for n, v in values.items()
               if not isinstance(v, np.ndarray)}
    qb = kb = None
    if bound_tile and "q_doc" in values:
        qb = pos.token_bounds({"q_doc": values["q_doc"]}, bound_tile)
        kb = pos.token_bounds({"k_doc": values["k_doc"]}, bound_tile)
    return pos.MaskBoxes(g, scalars, qb, kb)


def ring_blocks(name, layout, world, chunk, values, tile, bound_tile=None):
    return pos.ring_plan(boxes_of(name, values, bound_tile), layout, world,
                         chunk, tile)


class Plan(unittest.TestCase):
    def test_blocks_cover_the_mask(self):
        rng = np.random.default_rng(7)
        for name in MASKS:
            for layout in plan.LAYOUTS:
                for world in (1, 2, 3, 4):
                    chunk = 24
                    n = plan.num_chunks(layout, world) * chunk
                    values = case_values(name, n, rng)
                    idx = [np.concatenate(
                        [np.arange(a, b) for a, b in
                         plan.shard_ranges(layout, world, r, n)])
                        for r in range(world)]
                    bt = (None, 4, 8)[world % 3]
                    blocks, travel = ring_blocks(name, layout, world, chunk,
                                                 values, 4, bt)
                    what = (name, layout, world, bt)
                    for r in range(world):
                        for s in range(world):
                            m = whole_mask(name, idx[r], idx[s], values)
                            cover = np.zeros(m.shape, int)
                            for b in blocks[r][s]:
                                # Segments: positions count up from q_pos.
                                np.testing.assert_array_equal(
                                    idx[r][b.q0:b.q1],
                                    b.q_pos + np.arange(b.q1 - b.q0))
                                np.testing.assert_array_equal(
                                    idx[s][b.k0:b.k1],
                                    b.k_pos + np.arange(b.k1 - b.k0))
                                cover[b.q0:b.q1, b.k0:b.k1] += 1
                                if b.kind == "full":
                                    self.assertTrue(
                                        m[b.q0:b.q1, b.k0:b.k1].all(), what)
                                if r != s:
                                    a, e = travel[s]
                                    self.assertTrue(a <= b.k0 and b.k1 <= e)
                            self.assertLessEqual(cover.max(), 1, what)
                            self.assertTrue((cover[m] == 1).all(), what)

    def test_window_sends_its_tail_one_way(self):
        # 2 ranks, contiguous, 1024 tokens each: rank 1's first 256 rows
        # read rank 0's last 256 keys; rank 0 reads nothing of rank 1.
        blocks, travel = ring_blocks("mha_sliding_window", "contiguous", 2,
                                     1024, {}, tile=128)
        self.assertEqual(travel, [(768, 1024), None])
        self.assertEqual(blocks[1][0], [pos.PosBlock(
            "masked", 0, 256, 768, 1024, 1024, 768)])
        self.assertEqual(blocks[0][1], [])
        # Zigzag (chunks 0, 3 | 1, 2 of 512): each rank sends one tail.
        blocks, travel = ring_blocks("mha_sliding_window", "zigzag", 2, 512,
                                     {}, tile=128)
        self.assertEqual(travel, [(256, 512), (768, 1024)])


class Bounds(unittest.TestCase):
    def test_token_bounds(self):
        b = pos.token_bounds({"x": [3, 1, 2, 9, float("nan"), 0, 5]}, 2)
        self.assertEqual(b.table["x"], ([1.0, 2.0, None, 5.0],
                                        [3.0, 9.0, None, 5.0]))
        self.assertEqual(b.over("x", 0, 3), (1.0, 9.0))
        self.assertEqual(b.over("x", 1, 1), (1.0, 3.0))
        self.assertIsNone(b.over("x", 3, 5))  # a tile with a NaN
        self.assertIsNone(b.over("x", 6, 9))  # past the tiles

    def test_document_trimmed_by_ids(self):
        # 2 contiguous shards of 1024 tokens, documents of 300: rank 1
        # reads only the document that crosses its start (tokens 900 to
        # 1199), and rank 0 nothing of rank 1. Without the ids' bounds the
        # whole shard travels and the step runs whole.
        ids = np.arange(2048) // 300
        values = {"q_doc": ids, "k_doc": ids}
        blocks, travel = ring_blocks("mha_document", "contiguous", 2, 1024,
                                     values, 128)
        self.assertEqual(travel, [(0, 1024), None])
        self.assertEqual([(b.q0, b.q1, b.k0, b.k1) for b in blocks[1][0]],
                         [(0, 1024, 0, 1024)])
        blocks, travel = ring_blocks("mha_document", "contiguous", 2, 1024,
                                     values, 128, 128)
        self.assertEqual(travel, [(896, 1024), None])
        self.assertEqual(blocks[1][0], [pos.PosBlock(
            "masked", 0, 256, 896, 1024, 1024, 896)])
        self.assertEqual(blocks[0][1], [])
        # Zigzag (chunks 0, 3 | 1, 2 of 512): rank 0's last chunk (1536+)
        # meets none of rank 0's first (by the ids; causally it could).
        blocks, travel = ring_blocks("mha_document", "zigzag", 2, 512,
                                     values, 128, 128)
        self.assertEqual([(b.q0, b.k0) for b in blocks[0][0]],
                         [(0, 0), (512, 512)])

    def test_coalesced_steps(self):
        # Zigzag, 2 ranks: rank 1 holds chunks 1 and 2, consecutive in the
        # sequence and in its memory: its own step is one call over all of
        # its rows and keys (the window's pairs (1,1), (2,1), (2,2)).
        # Rank 0's chunks 0 and 3 are not: two calls.
        for name, values in (("mha_sliding_window", {}),
                             ("mha_prefix_lm", {"prefix_len": 100})):
            blocks, _ = ring_blocks(name, "zigzag", 2, 512, values, 128)
            self.assertEqual(blocks[1][1], [pos.PosBlock(
                "masked", 0, 1024, 0, 1024, 512, 512)], name)
            # (0,0), (3,3) and, for prefix-LM, (3,0)'s first keys.
            self.assertEqual(len(blocks[0][0]),
                             2 if name == "mha_sliding_window" else 3, name)
        # Blocks of one shift whose box would meet another block stay
        # apart, as do blocks of different shifts.
        segs = pos.segments([0, 1], 4)
        a = pos.PosBlock("full", 0, 2, 0, 2, 0, 0)
        b = pos.PosBlock("full", 2, 4, 2, 4, 2, 2)
        c = pos.PosBlock("masked", 0, 4, 2, 4, 5, 7)  # (not the segments')
        self.assertEqual(pos.coalesce([a, b, c], segs, segs), [a, c, b])
        self.assertEqual(pos.coalesce([a, b], segs, segs), [
            pos.PosBlock("masked", 0, 4, 0, 4, 0, 0)])
        full = pos.PosBlock("full", 0, 2, 2, 4, 0, 2)
        d = pos.PosBlock("full", 2, 4, 0, 2, 2, 0)
        self.assertEqual(pos.coalesce([a, b, full, d], segs, segs), [
            pos.PosBlock("full", 0, 4, 0, 4, 0, 0)])
        far = pos.segments([0, 3], 4)  # positions 0-3, then 12-15
        e = pos.PosBlock("full", 4, 6, 0, 2, 12, 0)
        self.assertEqual(pos.coalesce([a, e], far, far), [a, e])


class HostModel(unittest.TestCase):
    """The ring in float64 as attnc.distributed_positions runs it: each
    block's mask from the positioned twin's IR at local indices plus the
    block's offsets, its keys from what travels."""

    def ring(self, name, layout, world, chunk, q, k, v, do, values,
             bound_tile=None):
        n = len(q)
        twin = pos.positioned_graph(graph(name))
        blocks, travel = ring_blocks(name, layout, world, chunk, values, 4,
                                     bound_tile)
        idx = [np.concatenate([np.arange(a, b) for a, b in
                               plan.shard_ranges(layout, world, r, n)])
               for r in range(world)]

        def scores(r, s, b):
            qi, ki = idx[r][b.q0:b.q1], idx[s][b.k0:b.k1]
            if r != s:  # read from the travelling keys only
                a, _ = travel[s]
                ki = idx[s][a:][b.k0 - a:b.k1 - a]
            sc = q[qi] @ k[ki].T * SCALE
            if b.kind == "masked":
                keep = np.zeros(sc.shape, bool)
                for i in range(len(qi)):
                    for j in range(len(ki)):
                        vals = {pos.Q_OFFSET: (b.q_pos, b.q_pos),
                                pos.KV_OFFSET: (b.k_pos, b.k_pos)}
                        for nm, x in values.items():
                            if nm == "q_doc":
                                vals[nm] = (x[qi[i]], x[qi[i]])
                            elif nm == "k_doc":
                                vals[nm] = (x[ki[j]], x[ki[j]])
                            else:
                                vals[nm] = (x, x)
                        keep[i, j] = point(twin, i, j, vals)
                sc = np.where(keep, sc, -np.inf)
            return qi, ki, sc

        outs, fins = [], []
        for r in range(world):
            parts = []
            for t in range(world):
                s = plan.source(r, t, world)
                for b in blocks[r][s]:
                    qi, ki, sc = scores(r, s, b)
                    po, pf = forward("softmax", q[qi], k[ki], v[ki], sc)
                    o = np.zeros((len(idx[r]), v.shape[1]))
                    f = np.full((1, len(idx[r])), -np.inf)
                    o[b.q0:b.q1], f[:, b.q0:b.q1] = po, pf
                    parts.append((o, f))
            o, f = merge("softmax", parts)
            outs.append(o)
            fins.append(f)
        out, gq, gk, gv = (np.zeros_like(x) for x in (v, q, k, v))
        for r in range(world):
            out[idx[r]] = outs[r]
            for s in range(world):
                for b in blocks[r][s]:
                    qi, ki, sc = scores(r, s, b)
                    dq, dk, dv = backward("softmax", q[qi], k[ki], v[ki],
                                          outs[r][b.q0:b.q1], do[qi],
                                          fins[r][:, b.q0:b.q1], sc)
                    gq[qi] += dq
                    gk[ki] += dk
                    gv[ki] += dv
        return out, gq, gk, gv

    def test_equals_the_whole_sequence(self):
        rng = np.random.default_rng(11)
        for name in MASKS:
            for layout in plan.LAYOUTS:
                for world in (2, 3):
                    chunk = 8
                    n = plan.num_chunks(layout, world) * chunk
                    q, k = (rng.standard_normal((n, 8)) for _ in range(2))
                    v, do = (rng.standard_normal((n, 6)) for _ in range(2))
                    values = case_values(name, n, rng)
                    p = np.arange(n)
                    keep = whole_mask(name, p, p, values)
                    s = np.where(keep, q @ k.T * SCALE, -np.inf)
                    wo, wf = forward("softmax", q, k, v, s)
                    want = (wo,) + backward("softmax", q, k, v, wo, do, wf, s)
                    got = self.ring(name, layout, world, chunk, q, k, v, do,
                                    values, 4 if world == 3 else None)
                    for what, g, w in zip(("out", "dq", "dk", "dv"), got,
                                          want):
                        np.testing.assert_allclose(
                            g, w, rtol=1e-11, atol=1e-11,
                            err_msg=f"{name} {layout} W{world} {what}")


if __name__ == "__main__":
    unittest.main()
