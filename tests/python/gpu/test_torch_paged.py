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


if __name__ == "__main__":
    unittest.main()
