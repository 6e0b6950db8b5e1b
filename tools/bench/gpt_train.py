#!/usr/bin/env python3
"""A small GPT trained with attnc's attention and with PyTorch's, in one
process (issue 21): the loss curves, the step times and torch.compile's
graph count while a runtime scalar changes.

The model: 6 layers, d_model 512, 8 heads (head dim 64), causal, pre-norm
blocks (attention + a 4x GELU MLP), learned positions, tied embeddings;
fp32 weights under bf16 autocast (q, k, v reach the attention in bf16),
AdamW. The data: a synthetic copy task. Each sequence's first half walks a
fixed random Markov chain (every token has 4 equally likely successors),
its second half repeats the first: the loss falls from log(VOCAB) as the
model learns the chain (log 4 per token) and then the copy (0), which
needs attention to look back half a sequence.

Phases, each printed as it ends:
  reference  the first batch's loss with every attention computed in fp64
             (explicit causal softmax), from the same initial weights
  train      attnc ("mha") and SDPA (is_causal): each model
             torch.compile(fullgraph=True)'d, from the same initial
             weights, trained STEPS steps on the same batches; the step
             time (forward, backward, AdamW: CUDA events, steps 10.. ,
             median)
  compare    first loss: |attnc - ref| <= 2 |sdpa - ref| + 2^-9 ref (bf16:
             half an ulp of the loss); the mean of the last 50 steps'
             losses within 2% of SDPA's; the loss fell below 0.7 x the first
  recompile  the model with attnc's causal softcap (cap a runtime scalar,
             a 0-d CPU tensor) compiled with fullgraph=True and
             torch._dynamo.config.error_on_recompile, trained with a new
             cap every step: the graphs Dynamo compiled (expect 1, i.e. 0
             recompiles), its first loss against the softcap in fp64
  flex       FlexAttention (a causal block mask) trained the same way: its
             step time, and its last-50 mean's distance from SDPA's (the
             spread of two other correct kernels)
  eager      attnc and SDPA step times without torch.compile
  alone      one attention call's forward + backward at the model's shape:
             attnc, SDPA's flash and cuDNN backends, Flex (compiled)
Then the loss every 25 steps of each run, and PASS or FAIL.

    PYTHONPATH=python python3 tools/bench/gpt_train.py [--steps 300]
        [--seq 1024] [--batch 8] [--skip flex,eager]
"""
import argparse
import math
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

import attnc
import attnc.torch
from attnc import dsl
from attnc.dsl import InputShape

VOCAB = 256
SUCCESSORS = 4


# -- the model ----------------------------------------------------------------

class Block(torch.nn.Module):
    def __init__(self, dim, heads, attend):
        super().__init__()
        self.heads, self.attend = heads, attend
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.proj = torch.nn.Linear(dim, dim, bias=False)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim),
                                       torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))

    def forward(self, x, extra):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads,
                                               d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B,H,S,d]
        a = self.attend(q, k, v, extra).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(a)
        return x + self.mlp(self.norm2(x))


class Gpt(torch.nn.Module):
    def __init__(self, attend, layers=6, dim=512, heads=8, seq=1024):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, dim)
        self.pos = torch.nn.Embedding(seq, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads, attend)
                                          for _ in range(layers))
        self.norm = torch.nn.LayerNorm(dim)
        for p in self.parameters():  # GPT-2's initialisation scale
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets, extra=None):
        x = self.tok(tokens) + self.pos.weight[None, :tokens.shape[1]]
        for b in self.blocks:
            x = b(x, extra)
        logits = self.norm(x) @ self.tok.weight.t()
        return F.cross_entropy(logits.float().view(-1, VOCAB),
                               targets.reshape(-1))


# -- attentions: q, k, v [B,H,S,d] bf16 -> [B,H,S,d] --------------------------

def attnc_causal(q, k, v, extra):
    return attnc.torch.attention(q, k, v, "mha")


def sdpa_causal(q, k, v, extra):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@torch.autocast("cuda", enabled=False)  # float64 throughout
def fp64_causal(q, k, v, extra):
    """The reference: explicit causal softmax in float64, rounded to q's
    dtype once at the end."""
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    p = torch.softmax(s.masked_fill(~_causal(q), float("-inf")), dim=-1)
    return (p @ v.double()).to(q.dtype)


def flex_causal(seq):
    from torch.nn.attention.flex_attention import (create_block_mask,
                                                   flex_attention)
    mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, seq,
                             seq, device="cuda")
    return lambda q, k, v, extra: flex_attention(q, k, v, block_mask=mask)


def softcap_definition():
    """A causal softmax whose scores are soft-capped, cap * tanh(s / cap),
    with the cap a runtime scalar (a kernel argument: a new value compiles
    nothing)."""
    d = dsl.AttentionDef("gpt_softcap_causal")
    d.inputs.declare("cap", InputShape.Scalar, 5.0, 50.0)

    def score_mod(score, inputs, b, h, q_idx, kv_idx):
        cap = inputs["cap"]
        return cap * (score * inputs.head_dim().rsqrt() / cap).tanh()

    d.score_mod = score_mod
    d.mask_mod = lambda b, h, q_idx, kv_idx: q_idx >= kv_idx
    d.online_func = dsl.online_softmax()
    return d.build()


_softcap = None


def softcap_name():
    """The softcap definition's name, registered with attnc.torch (made
    once, outside any compiled region: the op takes definitions by name)."""
    global _softcap
    if _softcap is None:
        _softcap = attnc.torch.register(softcap_definition())
    return _softcap


def attnc_softcap(q, k, v, cap):
    return attnc.torch.attention(q, k, v, _softcap, inputs={"cap": cap})


@torch.autocast("cuda", enabled=False)  # dtype throughout (no fp32 softmax)
def explicit_softcap(q, k, v, cap, dtype):
    """The softcap attention computed directly in dtype (float64: the
    reference; q's dtype: the plain computation), rounded to q's dtype."""
    s = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) / math.sqrt(q.shape[-1])
    c = float(cap)
    s = c * torch.tanh(s / c)
    p = torch.softmax(s.masked_fill(~_causal(q), float("-inf")), dim=-1)
    return (p @ v.to(dtype)).to(q.dtype)


def fp64_softcap(q, k, v, cap):
    return explicit_softcap(q, k, v, cap, torch.float64)


def plain_softcap(q, k, v, cap):
    return explicit_softcap(q, k, v, cap, q.dtype)


def _causal(q):
    n = q.shape[-2]
    return torch.ones(n, n, device=q.device).tril().bool()


# -- data ---------------------------------------------------------------------

def batches(steps, batch, seq, seed=1):
    """steps batches of (inputs, targets) [batch, seq] int64 on the GPU:
    a Markov walk of seq/2 + 1 tokens, then its repetition."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randint(0, VOCAB, (VOCAB, SUCCESSORS), generator=g)
    half = seq // 2 + 1
    out = []
    for _ in range(steps):
        walk = torch.empty(batch, half, dtype=torch.int64)
        walk[:, 0] = torch.randint(0, VOCAB, (batch,), generator=g)
        pick = torch.randint(0, SUCCESSORS, (batch, half), generator=g)
        for i in range(1, half):
            walk[:, i] = table[walk[:, i - 1], pick[:, i]]
        tokens = torch.cat([walk, walk], dim=1)[:, :seq + 1].cuda()
        out.append((tokens[:, :-1], tokens[:, 1:]))
    return out


def initial_state(layers, seq, seed=0):
    torch.manual_seed(seed)
    return Gpt(None, layers=layers, seq=seq).state_dict()


# -- training -----------------------------------------------------------------

def make(attend, state, layers, seq):
    model = Gpt(attend, layers=layers, seq=seq).cuda()
    model.load_state_dict(state)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95),
                            weight_decay=0.0, fused=True)
    return model, opt


def lr_at(step, warmup=20):
    return 1e-3 * min(1.0, (step + 1) / warmup)


def train(attend, state, data, layers, seq, compile_model, extras=None,
          warmup_steps=10):
    """(losses (floats), step times (ms, from step warmup_steps on, CUDA
    events), the host's median time to enqueue a step (ms)) of training
    on data; extras[i] is step i's extra argument."""
    model, opt = make(attend, state, layers, seq)
    fn = torch.compile(model, fullgraph=True) if compile_model else model
    losses, events, host = [], [], []
    for i, (x, y) in enumerate(data):
        for group in opt.param_groups:
            group["lr"] = lr_at(i)
        start, end = (torch.cuda.Event(enable_timing=True)
                      for _ in range(2))
        t0 = time.perf_counter()
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fn(x, y, None if extras is None else extras[i])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        host.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.detach())
        events.append((start, end))
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in events[warmup_steps:]]
    return [x.item() for x in losses], times, median(host[warmup_steps:])


@torch.no_grad()
def first_loss(attend, state, data, layers, seq, extra=None):
    model, _ = make(attend, state, layers, seq)
    x, y = data[0]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(x, y, extra).item()


def attention_alone(batch, seq, heads=8, head_dim=64, reps=30):
    """Forward + backward of one attention call at the model's shape
    ([B,H,S,64] bf16, causal), ms (CUDA events, 5 warm-up calls, median of
    reps), per implementation; a peer that cannot run says why."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    g = torch.Generator(device="cuda").manual_seed(7)
    sets = [[torch.randn(batch, heads, seq, head_dim, device="cuda",
                         dtype=torch.bfloat16, generator=g)
             .requires_grad_() for _ in range(3)] for _ in range(3)]
    dout = torch.randn(batch, heads, seq, head_dim, device="cuda",
                       dtype=torch.bfloat16, generator=g)
    flex = flex_causal(seq)
    compiled_flex = torch.compile(flex, fullgraph=True)

    def cudnn(q, k, v, extra):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return sdpa_causal(q, k, v, extra)

    def flash(q, k, v, extra):
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return sdpa_causal(q, k, v, extra)

    result = {}
    for name, fn in (("attnc", attnc_causal), ("sdpa flash", flash),
                     ("sdpa cudnn", cudnn), ("flex", compiled_flex)):
        try:
            times = []
            for i in range(5 + reps):
                q, k, v = sets[i % 3]
                start, end = (torch.cuda.Event(enable_timing=True)
                              for _ in range(2))
                start.record()
                out = fn(q, k, v, None)
                torch.autograd.grad(out, (q, k, v), dout)
                end.record()
                times.append((start, end))
            torch.cuda.synchronize()
            result[name] = median([s.elapsed_time(e) for s, e in times[5:]])
        except Exception as e:  # a peer that cannot run says why
            result[name] = f"unavailable ({type(e).__name__}: " \
                f"{(str(e).splitlines() or [''])[0][:120]})"
    return result


def graphs_compiled():
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def softcap_recompiles(state, data, layers, seq, caps):
    """Trains the softcap model compiled with fullgraph=True for len(caps)
    steps, cap caps[i] at step i (0-d CPU tensors), with
    error_on_recompile: (graphs compiled, losses, the first step's loss
    with the softcap computed in fp64 and in bf16 at caps[0])."""
    softcap_name()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    extras = [torch.tensor(float(c)) for c in caps]
    saved = torch._dynamo.config.error_on_recompile
    torch._dynamo.config.error_on_recompile = True
    try:
        losses, _, _ = train(attnc_softcap, state, data[:len(caps)], layers,
                          seq, True, extras, warmup_steps=0)
    finally:
        torch._dynamo.config.error_on_recompile = saved
    graphs = graphs_compiled()
    cap = torch.tensor(float(caps[0]))
    ref = first_loss(fp64_softcap, state, data, layers, seq, cap)
    plain = first_loss(plain_softcap, state, data, layers, seq, cap)
    return graphs, losses, ref, plain


def first_loss_ok(got, plain, ref):
    """Within bf16 accuracy: no further from the fp64-attention loss than
    twice another bf16 computation (plain: SDPA, or the explicit formula in
    bf16) is, plus half a bf16 ulp of the loss."""
    return abs(got - ref) <= 2 * abs(plain - ref) + 2.0 ** -9 * abs(ref)


def tail_mean(losses, n=50):
    return statistics.fmean(losses[-n:])


# -- the command --------------------------------------------------------------

def median(xs):
    return statistics.median(xs) if xs else float("nan")


def phase(name, fn, failures):
    t0 = time.time()
    try:
        result = fn()
    except Exception:  # the other phases go on; the failure is reported
        traceback.print_exc()
        failures.append(name)
        result = None
    print(f"[{name}: {time.time() - t0:.1f} s]", flush=True)
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--skip", default="",
                    help="flex,eager,recompile,alone")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
          f"GPT L{args.layers} d512 h8 (d64) S{args.seq} B{args.batch} "
          f"vocab {VOCAB}, bf16 autocast, AdamW lr 1e-3, {args.steps} steps",
          flush=True)
    state = initial_state(args.layers, args.seq)
    data = batches(args.steps, args.batch, args.seq)
    failures, verdict, runs = [], [], {}
    ref = phase("reference", lambda: first_loss(
        fp64_causal, state, data, args.layers, args.seq), failures)
    print(f"first loss, fp64 attention: {ref}", flush=True)

    def train_compiled(name, make_attend):
        def run():
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()
            t0 = time.time()
            losses, times, host = train(make_attend(), state, data,
                                        args.layers, args.seq, True)
            return losses, times, host, graphs_compiled(), time.time() - t0
        result = phase(f"train {name}", run, failures)
        if result is not None:
            runs[name] = result
            losses, times, host, graphs, wall = result
            print(f"{name}: compiled step {median(times):.2f} ms (median of "
                  f"{len(times)}; the host enqueues a step in "
                  f"{host:.2f} ms), graphs {graphs}, wall "
                  f"{wall:.1f} s "
                  f"(compile included); loss {losses[0]:.4f} -> "
                  f"{tail_mean(losses):.4f}", flush=True)

    train_compiled("attnc", lambda: attnc_causal)
    train_compiled("sdpa", lambda: sdpa_causal)
    if "attnc" in runs and "sdpa" in runs and ref is not None:
        verdict += compare(runs, ref)

    if "recompile" not in skip:
        caps = [10.0 + 2.5 * (i % 8) for i in range(12)]
        result = phase("recompile", lambda: softcap_recompiles(
            state, data, args.layers, args.seq, caps), failures)
        if result is not None:
            graphs, losses, ref_cap, plain_cap = result
            ok = graphs == 1 and first_loss_ok(losses[0], plain_cap, ref_cap)
            verdict.append(ok)
            print(f"softcap model, torch.compile(fullgraph=True), "
                  f"error_on_recompile, cap {caps[0]}..{max(caps)} changed "
                  f"every step for {len(caps)} steps: graphs compiled "
                  f"{graphs} (recompiles {graphs - 1}); first loss "
                  f"{losses[0]:.6f}, softcap in fp64 {ref_cap:.6f}, in bf16 "
                  f"{plain_cap:.6f}; losses {losses[0]:.3f} -> "
                  f"{losses[-1]:.3f}: {'ok' if ok else 'FAIL'}", flush=True)

    if "flex" not in skip:
        train_compiled("flex", lambda: flex_causal(args.seq))
        if "flex" in runs and "sdpa" in runs:
            tf, ts = tail_mean(runs["flex"][0]), tail_mean(runs["sdpa"][0])
            print(f"flex: last 50 steps' mean {tf:.4f}, "
                  f"{abs(tf - ts) / ts:.2%} from sdpa's (the spread of two "
                  "other correct kernels)")

    if "eager" not in skip:
        n = min(40, args.steps)
        for name, attend in (("attnc", attnc_causal), ("sdpa", sdpa_causal)):
            result = phase(f"eager {name}", lambda attend=attend: train(
                attend, state, data[:n], args.layers, args.seq, False),
                failures)
            if result is not None:
                print(f"{name}: eager step {median(result[1]):.2f} ms "
                      f"(median of {len(result[1])}; host "
                      f"{result[2]:.2f} ms)", flush=True)

    if "alone" not in skip:
        result = phase("attention alone", lambda: attention_alone(
            args.batch, args.seq), failures)
        if result is not None:
            print(f"one attention call, forward + backward, B{args.batch} H8 "
                  f"S{args.seq} D64 bf16 causal (ms, median of 30): "
                  + ", ".join(f"{n} {t:.3f}" if isinstance(t, float)
                              else f"{n} {t}" for n, t in result.items()),
                  flush=True)

    if runs:
        print_curves(runs, args.steps)
        print("step time (torch.compile, ms, median): " + ", ".join(
            f"{n} {median(r[1]):.2f}" for n, r in runs.items()))
    passed = bool(verdict) and all(verdict) and not failures
    print(f"\n{'PASS' if passed else 'FAIL'}"
          + (f" (failed phases: {', '.join(failures)})" if failures else ""))
    return 0 if passed else 1


def compare(runs, ref):
    """The tolerance checks of attnc's run against SDPA's: [ok, ...]."""
    a, s = runs["attnc"][0], runs["sdpa"][0]
    ok1 = first_loss_ok(a[0], s[0], ref)
    print(f"first loss: attnc {a[0]:.6f}  sdpa {s[0]:.6f}  fp64 {ref:.6f}: "
          f"|attnc-ref| {abs(a[0] - ref):.2e} vs bound "
          f"{2 * abs(s[0] - ref) + 2 ** -9 * ref:.2e}: "
          f"{'ok' if ok1 else 'FAIL'}")
    ta, ts = tail_mean(a), tail_mean(s)
    rel = abs(ta - ts) / ts
    ok2 = rel <= 0.02
    fell = ts < 0.7 * s[0]
    print(f"last 50 steps' mean loss: attnc {ta:.4f}  sdpa {ts:.4f}: "
          f"relative difference {rel:.2%} (tolerance 2%): "
          f"{'ok' if ok2 else 'FAIL'}; the loss fell {s[0]:.3f} -> "
          f"{ts:.3f}: {'ok' if fell else 'FAIL'}", flush=True)
    return [ok1, ok2, fell]


def print_curves(runs, steps):
    print("\nloss every 25 steps:")
    names = list(runs)
    print("step  " + "  ".join(f"{n:>8s}" for n in names))
    for i in list(range(0, steps, 25)) + [steps - 1]:
        print(f"{i:4d}  " + "  ".join(f"{runs[n][0][i]:8.4f}"
                                      for n in names))


if __name__ == "__main__":
    sys.exit(main())
