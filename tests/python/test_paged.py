"""Paged KV from Python without a GPU: attnc.PagedKV's checks, the paged
calls' arguments (dense and packed decode, prefill, append) converted and
checked by the runtime (its messages raised with their kind), plans
refused where they are not the object's or not of the call's kind, and
the C interface's own checks of an attnc_paged_kv."""

import ctypes
import unittest

import attnc
from attnc import _lib, _paged
from test_attention import CudaArray

F32, I32 = "<f4", "<i4"
B, H, HKV, D, PAGES, PAGE = 2, 4, 2, 64, 10, 16


def cache(page=PAGE, typestr="<f2"):
    return CudaArray((PAGES, page, HKV, D), typestr)


def table_kv(**kw):
    args = dict(block_table=CudaArray((B, 4), I32),
                seq_lens=CudaArray((B,), I32), max_seqlen_kv=64)
    args.update(kw)
    k = args.pop("k_cache", cache())
    v = args.pop("v_cache", cache())
    return attnc.PagedKV(k, v, **args)


class PagedKVChecks(unittest.TestCase):
    def refused(self, message, **kw):
        with self.assertRaises(attnc.InvalidArgument) as caught:
            kw.setdefault("max_seqlen_kv", 64)
            attnc.PagedKV(cache(), cache(), **kw)
        self.assertEqual(str(caught.exception), "attnc.PagedKV: " + message)

    def test_forms(self):
        bt, sl = CudaArray((B, 4), I32), CudaArray((B,), I32)
        ip, ix, lp = (CudaArray((B + 1,), I32), CudaArray((7,), I32),
                      CudaArray((B,), I32))
        self.refused("argument 'block_table': None, and no CSR pages either; "
                     "give block_table and seq_lens, or indptr, indices and "
                     "last_page_len")
        self.refused("argument 'indptr': given with a block table; give "
                     "block_table and seq_lens, or indptr, indices and "
                     "last_page_len", block_table=bt, seq_lens=sl, indptr=ip)
        self.refused("argument 'seq_lens': None, and the other tensors of "
                     "its form are given", block_table=bt)
        self.refused("argument 'last_page_len': None, and the other tensors "
                     "of its form are given", indptr=ip, indices=ix)
        kv = attnc.PagedKV(cache(), cache(), indptr=ip, indices=ix,
                           last_page_len=lp, max_seqlen_kv=100,
                           page_layout="HND")
        self.assertEqual((kv.form, kv.batch, kv.page_size, kv.heads_kv),
                         ("csr", B, HKV, PAGE))  # HND: [pages, Hkv, page, D]

    def test_bound_and_layout(self):
        bt, sl = CudaArray((B, 4), I32), CudaArray((B,), I32)
        self.refused("argument 'max_seqlen_kv': None; a bound on every "
                     "sequence's keys is needed (the lengths are device "
                     "data)", block_table=bt, seq_lens=sl, max_seqlen_kv=None)
        self.refused("argument 'max_seqlen_kv': -1 is below 0",
                     block_table=bt, seq_lens=sl, max_seqlen_kv=-1)
        self.refused("argument 'max_seqlen_kv': True; expected an int",
                     block_table=bt, seq_lens=sl, max_seqlen_kv=True)
        self.refused("argument 'page_layout': 'NDH' is not 'NHD' or 'HND'",
                     block_table=bt, seq_lens=sl, page_layout="NDH")


class PagedCalls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.att = attnc.Attention(attnc.example("mha"), head_dim=D,
                                  layout="bhsd", arch="sm_90a")

    def refused(self, call, message, kind=attnc.InvalidArgument):
        with self.assertRaises(kind) as caught:
            call()
        self.assertEqual(str(caught.exception), message)

    def decode_args(self, **kw):
        args = dict(q=CudaArray((B, H, 1, D)), kv=table_kv(),
                    out=CudaArray((B, H, 1, D)),
                    finals=CudaArray((1, B, H, 1), F32))
        args.update(kw)
        return args

    def test_decode_arguments_reach_the_runtime(self):
        att = self.att
        self.refused(lambda: att.decode_paged(**self.decode_args(
            out=CudaArray((B, H, 2, D)))),
            "out: expected batch 2, seq 1 and heads 4 (as q), got 2, 2 and 4")
        self.refused(lambda: att.decode_paged(**self.decode_args(
            kv=table_kv(k_cache=cache(typestr=F32)))),
            "k_cache: expected dtype f16, got f32")
        self.refused(lambda: att.decode_paged(**self.decode_args(
            kv=table_kv(block_table=CudaArray((B, 4))))),
            "block_table: expected dtype i32, got f16")
        self.refused(lambda: att.decode_paged(**self.decode_args(
            kv=table_kv(k_cache=cache(12), v_cache=cache(12)))),
            "k_cache: the page size (second dimension) must be a power of "
            "two, got 12")
        self.refused(lambda: att.decode_paged(**self.decode_args(kv="kv")),
                     "attnc.Attention.decode_paged: argument 'kv': a str; "
                     "expected an attnc.PagedKV")
        self.refused(lambda: att.decode_paged(**self.decode_args(
            q=CudaArray((B, H, 1, D), "<f8"))),
            "attnc.Attention.decode_paged: argument 'q': "
            "__cuda_array_interface__ typestr '<f8' is not <f2, <f4 or <i4")

    def test_append_and_prefill_arguments(self):
        att, kv = self.att, table_kv()
        tokens = CudaArray((5, HKV, D))
        self.refused(lambda: att.append_paged(tokens, tokens, kv,
                                              CudaArray((5,), F32)),
                     "slot_mapping: expected dtype i32 or i64, got f32")
        self.refused(lambda: att.prefill_paged(
            CudaArray((9, H, D)), CudaArray((B + 2,), I32), 5, kv,
            CudaArray((9, H, D)), CudaArray((1, H, 9), F32)),
            "block_table: expected shape [3, 4], got [2, 4]")
        self.refused(lambda: att.prefill_paged(
            CudaArray((9, H, D)), CudaArray((B + 1,), I32), -1, kv,
            CudaArray((9, H, D))),
            "attnc.Attention.prefill_paged: argument 'max_seqlen_q': -1 is "
            "below 0")

    def test_plans(self):
        att = self.att
        self.refused(lambda: att.plan_decode(B, H, HKV, 1, 64, 12),
                     "page size: expected a power of two from 1 to 2^20, "
                     "got 12")
        self.refused(lambda: att.plan_prefill(B, H, HKV, 5, 64, 12),
                     "page size: expected a power of two from 1 to 2^20, "
                     "got 12")
        self.refused(lambda: att.plan_decode(0, H, HKV, 1, 64, 16),
                     "attnc.Attention.plan_decode: argument 'batch': 0 is "
                     "below 1")
        other = attnc.Attention(attnc.example("mha"), head_dim=D,
                                layout="bhsd", arch="sm_90a")
        plan = _paged.DecodePlan(other, None, 0, {})
        self.refused(lambda: att.run_decode(plan, **self.decode_args()),
                     "attnc.Attention.run_decode: argument 'plan': not a "
                     "DecodePlan of this object (make it with this object's "
                     "plan_decode)")
        self.refused(lambda: att.run_prefill(
            None, CudaArray((9, H, D)), CudaArray((B + 1,), I32), table_kv(),
            CudaArray((9, H, D))),
            "attnc.Attention.run_prefill: argument 'plan': not a "
            "PrefillPlan of this object (make it with this object's "
            "plan_prefill)")


class PackedDecode(unittest.TestCase):
    """decode_paged_varlen, plan_decode(packed=True) and run_decode_varlen:
    each argument checked (here, or by the runtime with its message)
    before anything compiles or launches; a plan's kind against the
    call."""

    @classmethod
    def setUpClass(cls):
        cls.att = attnc.Attention(attnc.example("mha"), head_dim=D,
                                  layout="bhsd", arch="sm_90a")

    def refused(self, call, message, kind=attnc.InvalidArgument):
        with self.assertRaises(kind) as caught:
            call()
        self.assertEqual(str(caught.exception), message)

    def args(self, **kw):
        # 10 query tokens of B sequences, at most 4 a sequence.
        args = dict(q=CudaArray((10, H, D)), cu_seqlens_q=CudaArray(
            (B + 1,), I32), max_seqlen_q=4, kv=table_kv(),
            out=CudaArray((10, H, D)), finals=CudaArray((1, H, 10), F32))
        args.update(kw)
        return args

    def test_arguments(self):
        att, where = self.att, "attnc.Attention.decode_paged_varlen"
        call = lambda **kw: (lambda: att.decode_paged_varlen(
            **self.args(**kw)))
        self.refused(call(out=CudaArray((9, H, D))),
                     "out: expected tokens 10 and heads 4 (as q), got 9 and 4")
        self.refused(call(finals=CudaArray((1, H, 9), F32)),
                     "finals: expected shape [1, 4, 10], got [1, 4, 9]")
        self.refused(call(max_seqlen_q=0),
                     f"{where}: argument 'max_seqlen_q': 0 is below 1")
        self.refused(call(max_seqlen_q=17),
                     "max_seqlen_q: expected 1 to 16 (decode's queries per "
                     "sequence), got 17")
        self.refused(call(cu_seqlens_q=CudaArray((B + 1,), F32)),
                     "cu_seqlens_q: expected dtype i32, got f32")
        self.refused(call(kv="kv"), f"{where}: argument 'kv': a str; "
                     "expected an attnc.PagedKV")
        self.refused(call(kv=table_kv(block_table=CudaArray((B + 1, 4),
                                                            I32))),
                     "block_table: expected shape [2, 4], got [3, 4]")

    def test_plans(self):
        att = self.att
        self.refused(lambda: att.plan_decode(B, H, HKV, 17, 64, 16,
                                             packed=True),
                     "queries per sequence: expected 1 to 16, got 17")
        self.refused(lambda: att.plan_decode(B, H, HKV, 4, 64, 16,
                                             packed="yes"),
                     "attnc.Attention.plan_decode: argument 'packed': 'yes'; "
                     "expected a bool")
        packed = _paged.DecodePlan(att, None, 0, {}, packed=True)
        dense = _paged.DecodePlan(att, None, 0, {})
        self.refused(lambda: att.run_decode(packed, CudaArray((B, H, 1, D)),
                                            table_kv(),
                                            CudaArray((B, H, 1, D))),
                     "attnc.Attention.run_decode: argument 'plan': made for "
                     "packed calls; expected a plan of plan_decode(..., "
                     "packed=False)")
        a = self.args()
        del a["max_seqlen_q"]
        self.refused(lambda: att.run_decode_varlen(dense, **a),
                     "attnc.Attention.run_decode_varlen: argument 'plan': "
                     "made for dense calls; expected a plan of "
                     "plan_decode(..., packed=True)")
        other = attnc.Attention(attnc.example("mha"), head_dim=D,
                                layout="bhsd", arch="sm_90a")
        foreign = _paged.DecodePlan(other, None, 0, {}, packed=True)
        self.refused(lambda: att.run_decode_varlen(foreign, **a),
                     "attnc.Attention.run_decode_varlen: argument 'plan': "
                     "not a DecodePlan of this object (make it with this "
                     "object's plan_decode)")

    def test_c_interface(self):
        # What the Python layer never passes: NULL plan and cu_seqlens_q.
        att = self.att
        shape = (ctypes.c_int64 * 3)(10, H, D)
        t = _paged.CTensor(data=1 << 20, dtype=0, ndim=3,
                           shape=ctypes.addressof(shape))
        kv = _paged._CPagedKV()
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _lib.check(_paged._run_decode_varlen(
                att._handle, None, ctypes.byref(t), ctypes.byref(t),
                ctypes.byref(kv), ctypes.byref(t), None, None, 0, None, 0,
                None))
        self.assertEqual(str(caught.exception),
                         "attnc_attention_run_decode_varlen: argument 'plan' "
                         "is NULL")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _lib.check(_paged._decode_varlen(
                att._handle, ctypes.byref(t), None, 4, ctypes.byref(kv),
                ctypes.byref(t), None, None, 0, None))
        self.assertEqual(str(caught.exception),
                         "attnc_attention_decode_paged_varlen: argument "
                         "'cu_seqlens_q': is NULL")


class CInterface(unittest.TestCase):
    """attnc_paged_kv's checks in the C interface (what attnc.PagedKV
    never passes, so called here directly)."""

    def call(self, kv):
        att = attnc.Attention(attnc.example("mha"), head_dim=D,
                              layout="bhsd", arch="sm_90a")
        shape = (ctypes.c_int64 * 4)(PAGES, PAGE, HKV, D)
        index = (ctypes.c_int64 * 1)(B)
        t = _paged.CTensor(data=1 << 20, dtype=0, ndim=4,
                           shape=ctypes.addressof(shape))
        i = _paged.CTensor(data=1 << 20, dtype=3, ndim=1,
                           shape=ctypes.addressof(index))
        self.keep = (shape, index)
        kv.k_cache = kv.v_cache = t
        q = t
        return kv, i, lambda: _lib.check(_paged._decode(
            att._handle, ctypes.byref(q), ctypes.byref(kv), ctypes.byref(q),
            None, None, 0, None))

    def refused(self, kv_setup, message):
        kv, index, call = self.call(_paged._CPagedKV())
        kv_setup(kv, index)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            call()
        self.assertEqual(str(caught.exception),
                         "attnc_attention_decode_paged: " + message)

    def test_paged_kv_struct(self):
        def both(kv, i):
            kv.block_table = kv.seq_lens = kv.indptr = i

        def neither(kv, i):
            pass

        def half(kv, i):
            kv.indptr = kv.indices = i

        def layout(kv, i):
            kv.block_table = kv.seq_lens = i
            kv.layout = 7

        def bound(kv, i):
            kv.block_table = kv.seq_lens = i
            kv.max_seqlen_kv = -5

        self.refused(both, "argument 'kv': both a block table (block_table, "
                     "seq_lens) and CSR pages (indptr, indices, "
                     "last_page_len) are given; give one form")
        self.refused(neither, "argument 'kv': no pages; give a block table "
                     "(block_table, seq_lens) or CSR pages (indptr, indices, "
                     "last_page_len)")
        self.refused(half, "argument 'kv.last_page_len': NULL data, and the "
                     "other tensors of its form are given")
        self.refused(layout, "argument 'kv.layout': 7 is not ATTNC_PAGE_NHD "
                     "(0) or ATTNC_PAGE_HND (1)")
        self.refused(bound, "argument 'kv.max_seqlen_kv': -5 is negative")


if __name__ == "__main__":
    unittest.main()
