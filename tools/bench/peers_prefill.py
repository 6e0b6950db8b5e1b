#!/usr/bin/env python3
"""Prefill-with-a-prefix peers on the shape attnc_bench_prefill times, in the
same command: B sequences of PREFIX cached keys and NEW new tokens, the new
queries attending causally to the prefix and the new keys (the causal mask
aligned to the bottom right: query i sees keys 0 .. PREFIX + i). Peers:

- SDPA with torch.nn.attention.bias.causal_lower_right (the bottom-right
  causal mask as SDPA's own bias, which its flash and efficient kernels run
  without a dense mask), per backend, the best of those that run; K/V are
  repeated to the query heads outside the timing (the bias path takes no
  enable_gqa); and SDPA's cuDNN backend with the same mask as a dense
  additive bias [new, kv] (broadcast over batch and heads; it reads the
  bias, so it is listed apart from "sdpa best");
- FlexAttention (torch.compile'd) with mask_mod q + PREFIX >= k, its block
  mask made outside the timing, GQA through enable_gqa;
- flash_attn_varlen_func (causal, bottom-right in FlashAttention 2) where
  the flash_attn package imports.

    python3 tools/bench/peers_prefill.py f16 HQ HKV D B PREFIX NEW [PEER ...]

PEER: sdpa, flex, flash_attn (default all three; flex compiles for tens of
seconds, so a time-boxed command may run it last on its own).

TFLOPS counts 4 * D * HQ * B * (NEW * PREFIX + NEW * (NEW + 1) / 2) per call
(the kept elements of Q K^T and P V). CUDA events, warm-up, median of 20.
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from peers_timing import compiled_flex, event_median_ms


def main():
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[sys.argv[1]]
    hq, hkv, d, b, prefix, new = (int(x) for x in sys.argv[2:8])
    peers = set(sys.argv[8:]) or {"sdpa", "flex", "flash_attn"}
    kv = prefix + new
    flops = 4.0 * d * hq * b * (new * prefix + new * (new + 1) / 2)
    tflops = lambda ms: flops / (ms * 1e-3) / 1e12
    fmt = lambda x: "n/a" if x is None else "%.0f" % x
    torch.manual_seed(0)
    q = torch.randn(b, hq, new, d, device="cuda", dtype=dtype)
    k = torch.randn(b, hkv, kv, d, device="cuda", dtype=dtype)
    v = torch.randn(b, hkv, kv, d, device="cuda", dtype=dtype)
    ms_of = lambda fn: event_median_ms(lambda i: fn(), 5, 20)
    row = {n: None for n in ("cudnn", "flash", "efficient", "cudnn_dense", "flex", "fa_varlen")}
    if "sdpa" in peers:
        from torch.nn.attention.bias import causal_lower_right
        bias = causal_lower_right(new, kv)
        ke = k.repeat_interleave(hq // hkv, dim=1)
        ve = v.repeat_interleave(hq // hkv, dim=1)
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("flash", SDPBackend.FLASH_ATTENTION),
                              ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    row[name] = tflops(ms_of(lambda: F.scaled_dot_product_attention(
                        q, ke, ve, attn_mask=bias)))
            except Exception as e:
                print("sdpa %s: %s" % (name, str(e).splitlines()[0][:160]), flush=True)
        # cuDNN with the bottom-right causal mask as a dense additive bias
        # (where its backend refuses the bias object above; the bias is read).
        keep = torch.ones(new, kv, device="cuda", dtype=torch.bool).tril(prefix)
        dense = torch.zeros(new, kv, device="cuda", dtype=dtype).masked_fill(
            ~keep, float("-inf")).expand(b, hq, new, kv)
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                row["cudnn_dense"] = tflops(ms_of(lambda: F.scaled_dot_product_attention(
                    q, ke, ve, attn_mask=dense)))
        except Exception as e:
            print("sdpa cudnn dense bias: %s" % str(e).splitlines()[0][:160], flush=True)
        del ke, ve, dense, keep
    if "flex" in peers:
        try:
            from torch.nn.attention.flex_attention import create_block_mask
            flex = compiled_flex()
            mask = create_block_mask(lambda b_, h_, q_, k_: q_ + prefix >= k_, None, None,
                                     new, kv, BLOCK_SIZE=128)
            row["flex"] = tflops(ms_of(lambda: flex(q, k, v, block_mask=mask,
                                                    enable_gqa=True)))
        except Exception as e:
            print("flex: %s" % str(e).splitlines()[0][:160], flush=True)
    if "flash_attn" in peers:
        try:
            from flash_attn import flash_attn_varlen_func
            qt = q.transpose(1, 2).reshape(b * new, hq, d).contiguous()
            kt = k.transpose(1, 2).reshape(b * kv, hkv, d).contiguous()
            vt = v.transpose(1, 2).reshape(b * kv, hkv, d).contiguous()
            cq = torch.arange(0, (b + 1) * new, new, device="cuda", dtype=torch.int32)
            ck = torch.arange(0, (b + 1) * kv, kv, device="cuda", dtype=torch.int32)
            row["fa_varlen"] = tflops(ms_of(lambda: flash_attn_varlen_func(
                qt, kt, vt, cq, ck, new, kv, causal=True)))
        except Exception as e:
            print("flash_attn: %s" % str(e).splitlines()[0][:160], flush=True)
    sdpa = [row[n] for n in ("cudnn", "flash", "efficient") if row[n]]
    print("peers %s hq%d hkv%d d%d B%d prefix%d new%d causal: sdpa best %s (cudnn %s, "
          "flash %s, efficient %s; cudnn with a dense bias %s) flex %s flash_attn_varlen %s "
          "TFLOPS" % (
              sys.argv[1], hq, hkv, d, b, prefix, new, fmt(max(sdpa) if sdpa else None),
              fmt(row["cudnn"]), fmt(row["flash"]), fmt(row["efficient"]),
              fmt(row["cudnn_dense"]), fmt(row["flex"]), fmt(row["fa_varlen"])), flush=True)


if __name__ == "__main__":
    main()
