"""attnc.torch's paged KV calls on the device: new tokens appended into a
cache of randomly ordered pages (paged_append), decode (block table and
CSR, bhsd and bshd, 1 and 2 queries a sequence, GQA) and paged prefill
over it, each per call and from a plan, against mha evaluated in fp64 over
each sequence's keys gathered from the pages (the project's rule: error
<= 2 x the same computation's in the input dtype + atol); a decode plan
captured in a CUDA graph and replayed over a growing cache.

Run as test_torch_ops.py (docs/python.md)."""

import math
import unittest

from gpu_support import HAVE_GPU, check_close, needs_gpu, torch

if HAVE_GPU:
    import attnc
    import attnc.torch

H, HKV, D, PAGE, PAGES = 4, 2, 64, 16, 96


class Cache:
    """A paged cache holding sequences of lengths, pages in random order;
    the cache's other slots hold random values too (never read)."""

    def __init__(self, lengths, capacity, dtype, seed):
        g = torch.Generator(device="cpu").manual_seed(seed)
        self.dtype = dtype
        self.k = torch.randn(PAGES, PAGE, HKV, D, generator=g).to(
            "cuda", dtype)
        self.v = torch.randn(PAGES, PAGE, HKV, D, generator=g).to(
            "cuda", dtype)
        self.max_pages = -(-capacity // PAGE)
        order = torch.randperm(PAGES, generator=g)
        self.table = order[:len(lengths) * self.max_pages].view(
            len(lengths), self.max_pages).to(torch.int32)
        self.lengths = list(lengths)
        self.g = g

    def kv(self, csr=False, bound=None):
        lens = torch.tensor(self.lengths, dtype=torch.int32, device="cuda")
        if not csr:
            return attnc.torch.paged_kv(
                self.k, self.v, block_table=self.table.cuda(), seq_lens=lens,
                max_seqlen_k=bound)
        used = [max(1, -(-n // PAGE)) for n in self.lengths]
        indptr = torch.tensor([0] + used).cumsum(0).to(torch.int32)
        indices = torch.cat([self.table[b, :u] for b, u in enumerate(used)])
        last = torch.tensor([n - PAGE * (u - 1) for n, u in
                             zip(self.lengths, used)], dtype=torch.int32)
        return attnc.torch.paged_kv(
            self.k, self.v, indptr=indptr.cuda(), indices=indices.cuda(),
            last_page_len=last.cuda(), max_seqlen_k=bound)

    def slots(self, b, start, n):
        t = torch.arange(start, start + n)
        return self.table[b, t // PAGE].long() * PAGE + t % PAGE

    def append(self, new):
        """Appends new[b] tokens to each sequence (random k, v) through
        paged_append; returns nothing, the lengths grow."""
        slots = torch.cat([self.slots(b, n0, n) for b, (n0, n) in
                           enumerate(zip(self.lengths, new))])
        t = int(slots.numel())
        k = torch.randn(t, HKV, D, generator=self.g).to("cuda", self.dtype)
        v = torch.randn(t, HKV, D, generator=self.g).to("cuda", self.dtype)
        attnc.torch.paged_append(k, v, self.kv(), slots.to(torch.int32).cuda(),
                                 "mha")
        self.lengths = [n0 + n for n0, n in zip(self.lengths, new)]

    def keys(self, b):
        """Sequence b's keys and values [L, HKV, D], gathered."""
        slots = self.slots(b, 0, self.lengths[b]).cuda()
        return (self.k.view(-1, HKV, D)[slots],
                self.v.view(-1, HKV, D)[slots])


def mha(q, k, v):
    """q [Sq,H,D] over k, v [L,HKV,D], causal with the queries at the end
    of the keys, in q's dtype (fp64 for the reference)."""
    sq, n = q.shape[0], k.shape[0]
    k = k.repeat_interleave(H // HKV, dim=1)
    v = v.repeat_interleave(H // HKV, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) * (1.0 / math.sqrt(D))
    qi = torch.arange(sq, device=q.device)[:, None] + (n - sq)
    ki = torch.arange(n, device=q.device)[None, :]
    s = s.masked_fill(ki > qi, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, -1).to(v.dtype), v)


@needs_gpu
class Paged(unittest.TestCase):
    def check_sequences(self, label, cache, q_seqs, out_seqs):
        for b, (q, out) in enumerate(zip(q_seqs, out_seqs)):
            k, v = cache.keys(b)
            ref = mha(q.double(), k.double(), v.double())
            plain = mha(q, k, v)
            check_close(self, f"{label} seq {b}", out, ref, plain)

    def decode(self, dtype, layout, sq, csr, seed):
        self._dtype = dtype
        cache = Cache([37, 200, 5, 0], 320, dtype, seed)
        cache.append([sq] * 4)
        g = cache.g
        b = len(cache.lengths)
        q = torch.randn(b, H, sq, D, generator=g).to("cuda", dtype)
        qx = q if layout == "bhsd" else q.transpose(1, 2).contiguous()
        out, finals = attnc.torch.paged_decode(
            qx, cache.kv(csr), "mha", layout=layout, return_finals=True)
        self.assertEqual(tuple(finals.shape), (1, b, H, sq))
        o = out if layout == "bhsd" else out.transpose(1, 2)
        self.check_sequences(f"decode {layout} sq{sq} csr={csr}", cache,
                             [q[i].transpose(0, 1) for i in range(b)],
                             [o[i].transpose(0, 1) for i in range(b)])
        plan = attnc.torch.plan_paged_decode("mha", qx, cache.kv(csr),
                                             layout=layout)
        planned = attnc.torch.paged_decode(qx, cache.kv(csr), "mha",
                                           plan=plan)
        self.check_sequences(f"planned decode {layout}", cache,
                             [q[i].transpose(0, 1) for i in range(b)],
                             [(planned if layout == "bhsd"
                               else planned.transpose(1, 2))[i]
                              .transpose(0, 1) for i in range(b)])

    def test_decode_block_table(self):
        self.decode(torch.float16, "bhsd", 1, False, 1)

    def test_decode_csr_bshd_two_queries(self):
        self.decode(torch.bfloat16, "bshd", 2, True, 2)

    def test_prefill(self):
        for dtype, csr, seed in ((torch.float16, False, 3),
                                 (torch.bfloat16, True, 4)):
            self._dtype = dtype
            cache = Cache([37, 200, 0, 16], 320, dtype, seed)
            new = [20, 1, 64, 16]
            cache.append(new)
            cu = torch.tensor([0] + new).cumsum(0).to(torch.int32).cuda()
            q = torch.randn(sum(new), H, D, generator=cache.g).to("cuda",
                                                                  dtype)
            kv = cache.kv(csr)
            out = attnc.torch.paged_prefill(q, cu, max(new), kv, "mha")
            starts = [0] + list(torch.tensor(new).cumsum(0)[:-1])
            seqs = [slice(int(s), int(s) + n) for s, n in zip(starts, new)]
            self.check_sequences(f"prefill csr={csr}", cache,
                                 [q[s] for s in seqs], [out[s] for s in seqs])
            plan = attnc.torch.plan_paged_prefill("mha", q, cu, max(new), kv)
            planned = attnc.torch.paged_prefill(q, cu, max(new), kv, "mha",
                                                plan=plan)
            self.check_sequences(f"planned prefill csr={csr}", cache,
                                 [q[s] for s in seqs],
                                 [planned[s] for s in seqs])

    def test_decode_plan_in_a_cuda_graph(self):
        # Captured once; each step appends a token, grows seq_lens in place
        # and writes a new q, then replays.
        dtype = self._dtype = torch.float16
        cache = Cache([30, 100, 7], 256, dtype, 5)
        cache.append([1, 1, 1])
        kv = cache.kv(bound=256)
        lens = kv.tensors["seq_lens"]
        q = torch.randn(3, H, 1, D, device="cuda", dtype=dtype)
        plan = attnc.torch.plan_paged_decode("mha", q, kv)
        out = torch.empty_like(q)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            attnc.torch.paged_decode(q, kv, "mha", plan=plan, out=out)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            attnc.torch.paged_decode(q, kv, "mha", plan=plan, out=out)
        for step in range(3):
            cache.append([1, 1, 1])
            lens.copy_(torch.tensor(cache.lengths, dtype=torch.int32))
            q.copy_(torch.randn(3, H, 1, D, generator=cache.g).to(dtype))
            graph.replay()
            torch.cuda.synchronize()
            self.check_sequences(f"graph step {step}", cache,
                                 [q[i].transpose(0, 1) for i in range(3)],
                                 [out[i].transpose(0, 1) for i in range(3)])

    def test_a_bad_cache_is_refused(self):
        q = torch.randn(1, H, 1, D, device="cuda", dtype=torch.float16)
        k = torch.randn(4, PAGE, HKV, D, device="cuda", dtype=torch.float32)
        kv = attnc.torch.paged_kv(
            k, k, block_table=torch.zeros(1, 4, dtype=torch.int32,
                                          device="cuda"),
            seq_lens=torch.ones(1, dtype=torch.int32, device="cuda"))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.torch.paged_decode(q, kv, "mha")
        self.assertIn("k_cache: expected dtype f16, got f32",
                      str(caught.exception))


@needs_gpu
class Ops(unittest.TestCase):
    """attnc::paged_append, paged_decode, paged_run_decode, paged_prefill
    and paged_run_prefill as torch.library ops."""

    def setUp(self):
        self._dtype = torch.float16
        self.check = Paged.check_sequences.__get__(self)

    def new_tokens(self, cache):
        """One new token a sequence: (k, v [B,HKV,D], int32 slots [B])."""
        b = len(cache.lengths)
        slots = torch.cat([cache.slots(i, n, 1)
                           for i, n in enumerate(cache.lengths)])
        k = torch.randn(b, HKV, D, generator=cache.g).to("cuda", cache.dtype)
        v = torch.randn(b, HKV, D, generator=cache.g).to("cuda", cache.dtype)
        return k, v, slots.to(torch.int32).cuda()

    def test_compiled_decode_step_has_no_graph_break(self):
        from torch._dynamo.testing import CompileCounterWithBackend
        from torch._dynamo.utils import counters
        torch._dynamo.reset()
        counters.clear()
        cache = Cache([30, 100, 7], 256, torch.float16, 6)
        kv0 = cache.kv(bound=256)
        table, lens = kv0.tensors["block_table"], kv0.tensors["seq_lens"]
        q = torch.randn(3, H, 1, D, device="cuda", dtype=torch.float16)
        plan = attnc.torch.plan_paged_decode("mha", q, kv0)

        def step(q, k_new, v_new, slots, k_cache, v_cache, table, lens):
            kv = attnc.torch.paged_kv(k_cache, v_cache, block_table=table,
                                      seq_lens=lens, max_seqlen_k=256)
            attnc.torch.paged_append(k_new, v_new, kv, slots, "mha")
            return attnc.torch.paged_decode(q, kv, "mha", plan=plan,
                                            return_finals=True)

        counter = CompileCounterWithBackend("inductor")
        compiled = torch.compile(step, backend=counter, fullgraph=True)
        equal = []
        for trial in range(3):
            k_new, v_new, slots = self.new_tokens(cache)
            cache.lengths = [n + 1 for n in cache.lengths]
            lens.copy_(torch.tensor(cache.lengths, dtype=torch.int32))
            q = torch.randn(3, H, 1, D, generator=cache.g).to(
                "cuda", torch.float16)
            out, finals = compiled(q, k_new, v_new, slots, cache.k, cache.v,
                                   table, lens)
            self.assertEqual(tuple(finals.shape), (1, 3, H, 1))
            self.check(f"compiled step {trial}", cache,
                       [q[i].transpose(0, 1) for i in range(3)],
                       [out[i].transpose(0, 1) for i in range(3)])
            eager, eager_finals = attnc.torch.paged_decode(
                q, cache.kv(bound=256), "mha", plan=plan,
                return_finals=True)
            equal.append(torch.equal(out, eager)
                         and torch.equal(finals, eager_finals))
        breaks = sum(counters["graph_break"].values())
        print(f"\npaged decode step, torch.compile(fullgraph=True): "
              f"{counter.frame_count} graph(s) over 3 steps, {breaks} graph "
              f"breaks; equal to eager: {equal}")
        self.assertEqual(counter.frame_count, 1)
        self.assertEqual(breaks, 0)
        self.assertEqual(equal, [True] * 3)

    def test_compiled_decode_in_a_cuda_graph(self):
        # The op path captured: a compiled decode step (its PagedKV made
        # inside) captured once, replayed as the sequences grow within the
        # plan's bound; appends run eagerly between replays.
        torch._dynamo.reset()
        cache = Cache([30, 100, 7], 256, torch.float16, 7)
        cache.append([1, 1, 1])
        kv0 = cache.kv(bound=256)
        table, lens = kv0.tensors["block_table"], kv0.tensors["seq_lens"]
        q = torch.randn(3, H, 1, D, device="cuda", dtype=torch.float16)
        plan = attnc.torch.plan_paged_decode("mha", q, kv0)

        def step(q, k_cache, v_cache, table, lens):
            kv = attnc.torch.paged_kv(k_cache, v_cache, block_table=table,
                                      seq_lens=lens, max_seqlen_k=256)
            return attnc.torch.paged_decode(q, kv, "mha", plan=plan)

        compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                compiled(q, cache.k, cache.v, table, lens)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = compiled(q, cache.k, cache.v, table, lens)
        for step_ in range(3):
            cache.append([1, 5, 1])
            lens.copy_(torch.tensor(cache.lengths, dtype=torch.int32))
            q.copy_(torch.randn(3, H, 1, D, generator=cache.g).to(
                torch.float16))
            graph.replay()
            torch.cuda.synchronize()
            self.check(f"compiled graph step {step_}", cache,
                       [q[i].transpose(0, 1) for i in range(3)],
                       [out[i].transpose(0, 1) for i in range(3)])

    def test_fake_tensor_shapes(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        cache = Cache([37, 200, 5], 320, torch.bfloat16, 8)
        real_kv = cache.kv()
        q = torch.randn(3, H, 2, D, device="cuda", dtype=torch.bfloat16)
        plan = attnc.torch.plan_paged_decode("mha", q, real_kv)
        qp = torch.randn(40, H, D, device="cuda", dtype=torch.bfloat16)
        cu = torch.tensor([0, 20, 21, 40], dtype=torch.int32, device="cuda")
        pplan = attnc.torch.plan_paged_prefill("mha", qp, cu, 20, real_kv)
        kinds = []
        # Non-fake inputs allowed: a plan's workspace is a real tensor
        # (under torch.compile it is a graph input, made fake there).
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = mode.from_tensor
            kv = attnc.torch.paged_kv(
                fake(cache.k), fake(cache.v),
                block_table=fake(real_kv.tensors["block_table"]),
                seq_lens=fake(real_kv.tensors["seq_lens"]))
            fq = fake(q)
            k_new = torch.empty(3, HKV, D, device="cuda",
                                dtype=torch.bfloat16)
            attnc.torch.paged_append(
                k_new, k_new, kv,
                torch.zeros(3, dtype=torch.int32, device="cuda"))
            for p in (None, plan):
                out, finals = attnc.torch.paged_decode(
                    fq, kv, "mha", plan=p, return_finals=True)
                kinds.append(type(out).__name__)
                self.assertEqual(tuple(out.shape), (3, H, 2, D))
                self.assertEqual(out.dtype, torch.bfloat16)
                self.assertEqual(tuple(finals.shape), (1, 3, H, 2))
                self.assertEqual(finals.dtype, torch.float32)
            for p in (None, pplan):
                out, finals = attnc.torch.paged_prefill(
                    fake(qp), fake(cu), 20, kv, "mha", plan=p,
                    return_finals=True)
                kinds.append(type(finals).__name__)
                self.assertEqual(tuple(out.shape), (40, H, D))
                self.assertEqual(tuple(finals.shape), (1, H, 40))
        self.assertEqual(kinds, ["FakeTensor"] * 4)

    def test_opcheck(self):
        cache = Cache([37, 200, 5], 320, torch.float16, 9)
        kv = cache.kv()
        t = kv.tensors
        kv_args = (cache.k, cache.v, t["block_table"], t["seq_lens"], None,
                   None, None, kv.max_seqlen_kv, "NHD")
        q = torch.randn(3, H, 1, D, device="cuda", dtype=torch.float16)
        plan = attnc.torch.plan_paged_decode("mha", q, kv)
        tests = ("test_schema", "test_faketensor")
        torch.library.opcheck(
            torch.ops.attnc.paged_decode.default,
            (q, torch.empty_like(q)) + kv_args + ("mha", "bhsd", "", []),
            test_utils=tests)
        torch.library.opcheck(
            torch.ops.attnc.paged_run_decode.default,
            (q, torch.empty_like(q), plan.workspace) + kv_args
            + (plan.torch_id, "", []), test_utils=tests)
        k_new = torch.randn(3, HKV, D, device="cuda", dtype=torch.float16)
        slots = torch.cat([cache.slots(i, n, 1) for i, n in
                           enumerate(cache.lengths)]).to(torch.int32).cuda()
        torch.library.opcheck(
            torch.ops.attnc.paged_append.default,
            (k_new, k_new.clone(), slots) + kv_args + ("mha",),
            test_utils=tests)


if __name__ == "__main__":
    unittest.main()
