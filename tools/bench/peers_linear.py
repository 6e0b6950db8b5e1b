#!/usr/bin/env python3
"""Times linear-attention peers on the shapes attnc_bench_linear times, in the
same run: flash-linear-attention's Triton chunk kernels (chunk_simple_gla,
chunk_retention; mamba2 as chunk_simple_gla with q = C, k = B, v = x*dt,
g = A*dt, the elementwise prologue included in its time) and, for mamba2, a
plain PyTorch chunked implementation. CUDA-event timing, warm-up, median of
20, inputs rotated over two sets; backward timed alone (autograd.grad on a
kept graph). Achieved bandwidth counts each input read once and each output
written once, as attnc_bench_linear does.

    python3 tools/bench/peers_linear.py NAME f16|bf16 B H T D DV [HQK]
    python3 tools/bench/peers_linear.py NAME,DT,B,H,T,D,DV[,HQK] ...

The second form times several problems in one process (Triton's compiles
and autotuning are paid once per kernel shape, not per problem); a row that
fails prints its error and the others go on.

fla 0.6.0 refuses the backward of its gated kernels (chunk_simple_gla, so
simple_gla and mamba2 here) with Triton >= 3.4 and < 3.7.1 on Hopper, which
it says miscompiles chunk_bwd_dqkwg. With --bwd-unguarded first, that check
is switched off so that the backward can be timed anyway; such rows are
printed as "fla-unguarded": their backward times a kernel fla itself calls
incorrect on this Triton, so they are indicative only. The forward is not
affected by the check.
"""
import sys

import torch

from peers_timing import event_median_ms


def median_ms(fn, n=20):
    return event_median_ms(fn, 3, n)


def torch_chunked(q, k, v, g, chunk=64):
    """o_t = q_t S_t, S_t = exp(g_t) S_{t-1} + k_t^T v_t, by chunks in fp32."""
    B, T, H, D = q.shape
    DV = v.shape[-1]
    n = T // chunk
    q, k, v = (x.float().view(B, n, chunk, H, -1) for x in (q, k, v))
    G = g.float().view(B, n, chunk, H).cumsum(2).permute(0, 1, 3, 2)  # B n H C
    mask = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = torch.exp((G[..., :, None] - G[..., None, :]).masked_fill(~mask, -float("inf")))
    scores = torch.einsum("bnihd,bnjhd->bnhij", q, k) * decay
    o = torch.einsum("bnhij,bnjhe->bnihe", scores, v)
    w = torch.exp(G[..., -1:] - G)  # B n H C
    upd = torch.einsum("bnjhd,bnhj,bnjhe->bnhde", k, w, v)
    S = torch.zeros(B, H, D, DV, device=q.device)
    inter = []
    for c in range(n):
        inter.append(S)
        S = torch.exp(G[:, c, :, -1])[..., None, None] * S + upd[:, c]
    inter = torch.stack(inter, 1)  # B n H D DV
    o = o + torch.einsum("bnihd,bnhde,bnhi->bnihe", q, inter, torch.exp(G))
    return o.reshape(B, T, H, DV)


def run_row(name, dts, B, H, T, D, DV, hqk):
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[dts]
    from fla.ops.retention import chunk_retention
    from fla.ops.simple_gla import chunk_simple_gla
    dev = "cuda"
    sets = []
    for _ in range(2):
        q = torch.randn(B, T, hqk, D, device=dev, dtype=dt)
        k = torch.randn(B, T, hqk, D, device=dev, dtype=dt)
        v = torch.randn(B, T, H, DV, device=dev, dtype=dt)
        do = torch.randn(B, T, H, DV, device=dev, dtype=dt)
        if hqk != H:  # fla has no head groups: the expanded copies are inputs
            q = q.repeat_interleave(H // hqk, dim=2)
            k = k.repeat_interleave(H // hqk, dim=2)
        g = -0.1 * torch.rand(B, T, H, device=dev, dtype=torch.float32)
        A = -0.2 - 1.8 * torch.rand(H, device=dev, dtype=torch.float32)
        dtv = 0.05 + 0.95 * torch.rand(B, T, H, device=dev, dtype=torch.float32)
        sets.append(dict(q=q, k=k, v=v, do=do, g=g, A=A, dt=dtv))
    nqk, nv = B * T * hqk * D, B * T * H * DV
    fwd_bytes = 2.0 * (2 * nqk + 2 * nv)
    bwd_bytes = 2.0 * (4 * nqk + 4 * nv)

    def fla_call(s):
        if name == "simple_gla":
            return chunk_simple_gla(s["q"], s["k"], s["v"], g=s["g"], scale=D ** -0.5)[0]
        if name == "retention_linear":
            return chunk_retention(s["q"], s["k"], s["v"], scale=D ** -0.5)[0]
        v = (s["v"].float() * s["dt"][..., None]).to(dt)
        return chunk_simple_gla(s["q"], s["k"], v, g=s["A"] * s["dt"], scale=1.0)[0]

    rows = []
    fwd = median_ms(lambda i: fla_call(sets[i % 2]))
    graphs = []
    for s in sets:
        leaves = [s["q"], s["k"], s["v"]] + ([s["g"]] if name == "simple_gla" else []) + \
                 ([s["A"], s["dt"]] if name == "mamba2" else [])
        for x in leaves:
            x.requires_grad_(True)
        graphs.append((fla_call(s), leaves, s["do"]))
    try:
        bwd = median_ms(lambda i: torch.autograd.grad(graphs[i % 2][0], graphs[i % 2][1],
                                                      graphs[i % 2][2], retain_graph=True))
    except RuntimeError as e:  # the forward is still worth printing
        print(f"fla {name} {dts} B{B} H{H} T{T} backward: {e}", flush=True)
        bwd = float("nan")
    rows.append(("fla-unguarded" if UNGUARDED and name != "retention_linear" else "fla", fwd, bwd))
    del graphs
    if name == "mamba2" and T % 64 == 0:
        for s in sets:
            for x in s.values():
                x.requires_grad_(False)

        def ref(s):
            v = s["v"].float() * s["dt"][..., None]
            return torch_chunked(s["q"], s["k"], v, s["A"] * s["dt"])
        rows.append(("torch-chunked", median_ms(lambda i: ref(sets[i % 2]), n=5), float("nan")))
    for peer, f, b in rows:
        print(f"{peer} {name} {dts} B{B} H{H} T{T} D{D} DV{DV} hqk{hqk} "
              f"fwd {f:.3f} ms {fwd_bytes / f / 1e6:.0f} GB/s  "
              f"bwd {b:.3f} ms {bwd_bytes / b / 1e6:.0f} GB/s", flush=True)
    del sets
    torch.cuda.empty_cache()


UNGUARDED = False


def main():
    global UNGUARDED
    args = sys.argv[1:]
    if args and args[0] == "--bwd-unguarded":
        UNGUARDED = True
        args = args[1:]
        import fla.ops.common.chunk_o as chunk_o
        chunk_o.TRITON_ABOVE_3_7_1 = True
    specs = [a.split(",") for a in args] if "," in args[0] else [args]
    for spec in specs:
        name, dts = spec[0], spec[1]
        B, H, T, D, DV = map(int, spec[2:7])
        hqk = int(spec[7]) if len(spec) > 7 else H
        try:
            run_row(name, dts, B, H, T, D, DV, hqk)
        except Exception as e:  # one failing row must not lose the others
            print(f"fla {name} {dts} B{B} H{H} T{T} D{D} DV{DV} hqk{hqk} "
                  f"error: {type(e).__name__}: {e}", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
