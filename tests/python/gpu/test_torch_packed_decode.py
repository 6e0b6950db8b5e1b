"""attnc.torch's packed (THD) decode on the device: each sequence its own
count of queries (speculative decoding's drafts appended to the cache
first), over a paged cache (paged_decode_varlen, block table and CSR, per
call and from a plan, a plan captured in a CUDA graph and replayed with
new counts in cu_seqlens_q) and over contiguous packed K/V (attention()
with cu_seqlens and max_seqlen_q <= 16: the short-query rule's decode
kernels), against mha in fp64 over each sequence's keys with the queries
at their end (the project's rule: error <= 2 x the same computation's in
the input dtype + atol). The ops' schemas and fake implementations are
checked with torch.library.opcheck.

Run as test_torch_ops.py (docs/python.md)."""

import unittest

from gpu_support import HAVE_GPU, check_close, needs_gpu, torch
import test_torch_paged as paged  # its Cache and checks (not its tests)

D, H, HKV, PAGE = paged.D, paged.H, paged.HKV, paged.PAGE

if HAVE_GPU:
    import attnc
    import attnc.torch


class Cache(paged.Cache):
    """test_torch_paged's cache with room for every sequence's capacity
    (its own has 96 pages): long enough sequences that decode splits its
    keys over CTAs (512 keys and more)."""

    def __init__(self, lengths, capacity, dtype, seed):
        g = torch.Generator(device="cpu").manual_seed(seed)
        self.max_pages = -(-capacity // PAGE)
        pages = len(lengths) * self.max_pages + 3
        self.dtype = dtype
        self.k = torch.randn(pages, PAGE, HKV, D, generator=g).to("cuda",
                                                                  dtype)
        self.v = torch.randn(pages, PAGE, HKV, D, generator=g).to("cuda",
                                                                  dtype)
        order = torch.randperm(pages, generator=g)
        self.table = order[:len(lengths) * self.max_pages].view(
            len(lengths), self.max_pages).to(torch.int32)
        self.lengths = list(lengths)
        self.g = g


def packed_queries(counts, pad, dtype, g):
    """q [sum(counts) + pad, H, D] and cu_seqlens_q (int32, on the device)."""
    cu = torch.tensor([0] + list(counts)).cumsum(0).to(torch.int32)
    q = torch.randn(int(cu[-1]) + pad, H, D, generator=g).to("cuda", dtype)
    return q, cu.cuda()


@needs_gpu
class PackedDecode(unittest.TestCase):
    def check_packed(self, label, cache, q, cu, out, finals=None):
        """Each sequence's rows of out against mha over its keys (the
        sequences without queries have no rows)."""
        bounds = cu.tolist()
        for b, (first, end) in enumerate(zip(bounds, bounds[1:])):
            if first == end:
                continue
            k, v = cache.keys(b)
            qs = q[first:end]
            check_close(self, f"{label} seq {b}", out[first:end],
                        paged.mha(qs.double(), k.double(), v.double()),
                        paged.mha(qs, k, v))
        if finals is not None:
            self.assertEqual(tuple(finals.shape), (1, H, q.shape[0]))

    def test_paged_per_call_and_planned(self):
        for dtype, csr, seed in ((torch.float16, False, 11),
                                 (torch.bfloat16, True, 12)):
            self._dtype = dtype
            cache = Cache([37, 200, 5, 0, 700], 1024, dtype, seed)
            counts = [1, 4, 0, 2, 16]
            cache.append(counts)  # the drafts' keys, as a serving step has
            q, cu = packed_queries(counts, 3, dtype, cache.g)
            kv = cache.kv(csr)
            out, finals = attnc.torch.paged_decode_varlen(
                q, cu, 16, kv, "mha", return_finals=True)
            self.check_packed(f"packed decode csr={csr}", cache, q, cu, out,
                              finals)
            plan = attnc.torch.plan_paged_decode_varlen("mha", q, cu, 16, kv)
            self.assertTrue(plan.packed)
            planned = attnc.torch.paged_decode_varlen(q, cu, 16, kv, "mha",
                                                      plan=plan)
            self.check_packed(f"planned packed decode csr={csr}", cache, q,
                              cu, planned)

    def test_a_dense_plan_is_refused(self):
        self._dtype = torch.float16
        cache = Cache([30, 100], 256, torch.float16, 13)
        cache.append([2, 1])
        q, cu = packed_queries([2, 1], 0, torch.float16, cache.g)
        kv = cache.kv()
        dense = attnc.torch.plan_paged_decode(
            "mha", torch.empty(2, H, 2, D, device="cuda",
                               dtype=torch.float16), kv)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.torch.paged_decode_varlen(q, cu, 2, kv, "mha", plan=dense)
        self.assertIn("made for dense calls", str(caught.exception))

    def test_plan_in_a_cuda_graph_with_new_counts(self):
        # Captured once with room for 4 queries a sequence; each replay
        # appends new drafts, writes new counts into cu_seqlens_q, the
        # lengths into seq_lens and a new q at the same addresses.
        dtype = self._dtype = torch.float16
        cache = Cache([30, 100, 7], 512, dtype, 14)
        cache.append([1, 1, 1])
        kv = cache.kv(bound=512)
        lens = kv.tensors["seq_lens"]
        q, cu = packed_queries([4, 4, 4], 0, dtype, cache.g)
        plan = attnc.torch.plan_paged_decode_varlen("mha", q, cu, 4, kv)
        out = torch.empty_like(q)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            attnc.torch.paged_decode_varlen(q, cu, 4, kv, "mha", plan=plan,
                                            out=out)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            attnc.torch.paged_decode_varlen(q, cu, 4, kv, "mha", plan=plan,
                                            out=out)
        for step, counts in enumerate(([1, 4, 2], [0, 3, 4], [4, 0, 1])):
            cache.append(counts)
            lens.copy_(torch.tensor(cache.lengths, dtype=torch.int32))
            new_q, new_cu = packed_queries(counts, 12 - sum(counts), dtype,
                                           cache.g)
            q.copy_(new_q)
            cu.copy_(new_cu)
            graph.replay()
            torch.cuda.synchronize()
            self.check_packed(f"graph step {step} counts {counts}", cache, q,
                              cu, out)

    def test_contiguous_packed_decode(self):
        # attention() of a packed batch of at most 16 queries a sequence
        # runs decode_sm80 (the short-query rule); q_idx bottom-right.
        for dtype, seed in ((torch.float16, 15), (torch.bfloat16, 16)):
            self._dtype = dtype
            cache = Cache([40, 600, 3], 1024, dtype, seed)
            counts = [3, 16, 1]
            cache.append(counts)
            ks, vs = zip(*(cache.keys(b) for b in range(3)))
            k, v = torch.cat(ks), torch.cat(vs)
            cu_k = torch.tensor([0] + cache.lengths).cumsum(0).to(
                torch.int32).cuda()
            q, cu = packed_queries(counts, 0, dtype, cache.g)
            out = attnc.torch.attention(
                q, k, v, "mha", cu_seqlens_q=cu, cu_seqlens_k=cu_k,
                max_seqlen_q=16, max_seqlen_k=max(cache.lengths))
            self.check_packed(f"contiguous packed decode {dtype}", cache, q,
                              cu, out)


@needs_gpu
class PackedDecodeOps(unittest.TestCase):
    """attnc::paged_decode_varlen and paged_run_decode_varlen as ops."""

    def test_fake_tensor_shapes(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        cache = Cache([37, 200, 5], 320, torch.bfloat16, 17)
        real_kv = cache.kv()
        q = torch.randn(9, H, D, device="cuda", dtype=torch.bfloat16)
        cu = torch.tensor([0, 4, 5, 9], dtype=torch.int32, device="cuda")
        plan = attnc.torch.plan_paged_decode_varlen("mha", q, cu, 4, real_kv)
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = mode.from_tensor
            kv = attnc.torch.paged_kv(
                fake(cache.k), fake(cache.v),
                block_table=fake(real_kv.tensors["block_table"]),
                seq_lens=fake(real_kv.tensors["seq_lens"]))
            for p in (None, plan):
                out, finals = attnc.torch.paged_decode_varlen(
                    fake(q), fake(cu), 4, kv, "mha", plan=p,
                    return_finals=True)
                self.assertEqual(type(finals).__name__, "FakeTensor")
                self.assertEqual(tuple(out.shape), (9, H, D))
                self.assertEqual(tuple(finals.shape), (1, H, 9))
                self.assertEqual(finals.dtype, torch.float32)

    def test_opcheck(self):
        cache = Cache([37, 200, 5], 320, torch.float16, 18)
        kv = cache.kv()
        t = kv.tensors
        kv_args = (cache.k, cache.v, t["block_table"], t["seq_lens"], None,
                   None, None, kv.max_seqlen_kv, "NHD")
        q = torch.randn(9, H, D, device="cuda", dtype=torch.float16)
        cu = torch.tensor([0, 4, 5, 9], dtype=torch.int32, device="cuda")
        plan = attnc.torch.plan_paged_decode_varlen("mha", q, cu, 4, kv)
        tests = ("test_schema", "test_faketensor")
        torch.library.opcheck(
            torch.ops.attnc.paged_decode_varlen.default,
            (q, cu, 4, torch.empty_like(q)) + kv_args + ("mha", "", []),
            test_utils=tests)
        torch.library.opcheck(
            torch.ops.attnc.paged_run_decode_varlen.default,
            (q, cu, torch.empty_like(q), plan.workspace) + kv_args
            + (plan.torch_id, "", []), test_utils=tests)


if __name__ == "__main__":
    unittest.main()
