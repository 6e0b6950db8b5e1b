#!/usr/bin/env python3
"""Times FlexAttention's forward+backward (a training step's attention) on
the score_mod variants that `attnc_bench_bwd NAME ... fwdbwd` times, in the
same run: each call runs the compiled flex_attention forward and then
torch.autograd.grad over q, k, v, with CUDA events, warm-up, median of 30,
inputs rotated over three sets. The block mask is made once, outside the
timing (create_block_mask), as a model shares it across layers.

    python3 tools/bench/peers_fwdbwd.py f16 H D S [S ...] [--variants a,b]
        [--go-file F]

B = 16384 / S. The variants, by attnc's definition names:
  mha                 causal softmax (also SDPA's flash and cuDNN backends)
  mha_alibi           causal, score + slope[h] * (kv - q), fixed slopes
  mha_sliding_window  causal within the last 256 keys
  mha_softcap30       causal, 30 * tanh(score / 30)
  sigmoid_attn, relu_attn: not expressible in Flex, which normalises every
  row with a softmax (no score_mod or mask_mod gives their outputs). Their
  peer is the dense formula under torch.compile ("dense-compile":
  sigmoid(score / sqrt(D) + bias) causal, relu(score / sqrt(D)) unmasked),
  which materialises the S x S scores; a shape it cannot hold prints
  "unavailable".
Flex's score is already scaled by 1/sqrt(D), attnc's score_mods scale it
themselves: the same math.

FLOPs: 2 * (4 * D + 3 * D) per kept (query, key) pair (the forward's two
products and the backward's five), the pairs counted from the mask, as
attnc_bench_bwd's fwdbwd mode counts them.

With --go-file, every case is compiled and warmed up as soon as it can be,
but the first timing waits until F exists (another program's timing runs
first, alone on the GPU); after that each case is timed as soon as it is
compiled, so that a run cut short still prints what it timed.
"""
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask

from peers_timing import compiled_flex, event_median_ms
from results import record

WINDOW = 256
CAP = 30.0
NOT_SOFTMAX = ("sigmoid_attn", "relu_attn")


def causal(b, h, q, kv):
    return q >= kv


def window(b, h, q, kv):
    return (q >= kv) & (q - kv < WINDOW)


def cases(H):
    """name -> (mask_mod, score_mod) for Flex."""
    # Fixed ALiBi slopes drawn in alibi's range, as attnc_bench_bwd draws
    # its per-head inputs (the values do not change the work).
    slopes = torch.rand(H, device="cuda") * 0.5

    def alibi(score, b, h, q, kv):
        return score + slopes[h] * (kv - q)

    def softcap(score, b, h, q, kv):
        return CAP * torch.tanh(score / CAP)

    return {"mha": (causal, None), "mha_alibi": (causal, alibi),
            "mha_sliding_window": (window, None),
            "mha_softcap30": (causal, softcap)}


SIGMOID_BIAS = -1.5  # inside sigmoid_attn's declared range [-3, 0]


def dense_sigmoid(q, k, v):
    s = (q @ k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5 + SIGMOID_BIAS
    S = q.shape[-2]
    keep = torch.ones(S, S, dtype=torch.bool, device=q.device).tril()
    p = torch.where(keep, torch.sigmoid(s), 0.0)
    return p.to(q.dtype) @ v


def dense_relu(q, k, v):
    s = (q @ k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5
    return torch.relu(s).to(q.dtype) @ v


DENSE_MAX_S = 4096
DENSE = {"sigmoid_attn": dense_sigmoid, "relu_attn": dense_relu}


def kept_pairs(fn, S):
    qi = torch.arange(S, device="cuda")
    kept = 0
    for r in range(0, S, 1024):  # slabs: S^2 booleans at 16k is 256 MiB
        kept += int(fn(0, 0, qi[r:r + 1024, None], qi[None, :]).sum())
    return kept


def line(impl, name, label, B, H, S, D, mask, ms, kept):
    flops = 2.0 * B * H * kept * 7 * D
    print(f"peer-fwdbwd {impl:10s} {name:18s} {label} B{B} H{H} S{S} D{D} "
          f"{mask}: {ms:.3f} ms  {flops / (ms * 1e-3) / 1e12:.1f} TFLOPS",
          flush=True)
    record("fwdbwd", impl, name, label, mask, B, H, S, D, D, ms,
           flops / (ms * 1e-3) / 1e12)


def sets_for(B, H, S, D, dt):
    qkv = [tuple(torch.randn(B, H, S, D, device="cuda", dtype=dt,
                             requires_grad=True) for _ in range(3))
           for _ in range(3)]
    douts = [torch.randn(B, H, S, D, device="cuda", dtype=dt) for _ in range(3)]
    return qkv, douts


def main():
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 256)
    args = sys.argv[1:]
    go_file = None
    if "--go-file" in args:
        at = args.index("--go-file")
        go_file = args[at + 1]
        del args[at:at + 2]
    only = None
    if "--variants" in args:
        at = args.index("--variants")
        only = args[at + 1].split(",")
        del args[at:at + 2]
    label = args[0]
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[label]
    H, D = int(args[1]), int(args[2])
    shapes = [int(s) for s in args[3:]]
    for name in NOT_SOFTMAX:
        if only is None or name in only:
            print(f"peer-fwdbwd flex {name}: not timed: FlexAttention "
                  "normalises rows with a softmax, which this variant has "
                  "not; no score_mod gives its output", flush=True)
    flex = compiled_flex()
    dense = {name: torch.compile(fn) for name, fn in DENSE.items()}
    pending = []  # compiled and warmed up, not yet timed
    started = go_file is None

    def time_pending():
        for impl, name, B, S, mask, step, kept in pending:
            try:
                ms = event_median_ms(lambda i: step(i % 3), 5, 30)
            except Exception as err:
                print(f"{impl} {name} S{S}: unavailable "
                      f"({(str(err).splitlines() or [''])[0][:200]})", flush=True)
                continue
            line(impl, name, label, B, H, S, D, mask, ms, kept)
        pending.clear()

    for S in shapes:
        B = max(1, 16384 // S)
        qkv, douts = sets_for(B, H, S, D, dt)
        for name, (mask_mod, score_mod) in cases(H).items():
            if only is not None and name not in only:
                continue
            mask = "window256" if mask_mod is window else "causal"
            kept = kept_pairs(mask_mod, S)
            if name == "mha":
                for impl, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                                      ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
                    def sdpa(i, backend=backend, qkv=qkv, douts=douts):
                        with sdpa_kernel(backend):
                            out = F.scaled_dot_product_attention(*qkv[i], is_causal=True)
                        torch.autograd.grad(out, qkv[i], douts[i])
                    pending.append((impl, name, B, S, mask, sdpa, kept))
            bm = create_block_mask(mask_mod, None, None, S, S)

            def step(i, bm=bm, score_mod=score_mod, qkv=qkv, douts=douts):
                # Bound now: pending steps run after the loop moves on.
                out = flex(*qkv[i], score_mod=score_mod, block_mask=bm)
                torch.autograd.grad(out, qkv[i], douts[i])

            try:
                for i in range(2):
                    step(i)
                torch.cuda.synchronize()
            except Exception as err:  # a compile failure is a result
                print(f"flex {name} S{S}: unavailable "
                      f"({(str(err).splitlines() or [''])[0][:200]})", flush=True)
                continue
            pending.append(("flex", name, B, S, mask, step, kept))
            if not started and os.path.exists(go_file):
                started = True
            if started:
                time_pending()
        for name in NOT_SOFTMAX:
            if only is not None and name not in only:
                continue
            if S > DENSE_MAX_S:
                print(f"dense-compile {name} S{S}: not run (its S x S fp32 "
                      f"scores need {B * H * S * S * 4 / 2**30:.0f} GiB a tensor)",
                      flush=True)
                continue
            mask = "causal" if name == "sigmoid_attn" else "none"
            kept = kept_pairs(causal, S) if mask == "causal" else S * S

            def dstep(i, fn=dense[name], qkv=qkv, douts=douts):
                out = fn(*qkv[i])
                torch.autograd.grad(out, qkv[i], douts[i])

            try:
                for i in range(2):
                    dstep(i)
                torch.cuda.synchronize()
            except Exception as err:  # out of memory at long S is a result
                print(f"dense-compile {name} S{S}: unavailable "
                      f"({(str(err).splitlines() or [''])[0][:200]})", flush=True)
                torch.cuda.empty_cache()
                continue
            pending.append(("dense-comp", name, B, S, mask, dstep, kept))
            if started:
                time_pending()
        del qkv, douts
        torch.cuda.empty_cache()
    while not started and not os.path.exists(go_file):
        time.sleep(0.2)
    time_pending()


if __name__ == "__main__":
    main()
