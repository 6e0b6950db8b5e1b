"""attnc.distributed.linear_attention_cp on the CPU (gloo, 1 to 4
processes), its attnc.torch.linear_attention calls replaced by a float64
torch token recurrence with the same contract (initial state in, final
state out, differentiable in everything): the one-pass scheme's state
passing (the all-gather and scan forward, the all-gather and reverse scan
backward), the passed state's contribution (q_mod as a scale of q and as a
general function, grouped q heads, both layouts) and the autograd wiring
(rank 0's final state receiving its gradient from the later ranks), forward
and gradients of q, k, v, the decay, mamba2's dt and A, learnable q_mod
inputs and the sequence's initial state against the recurrence over the
whole sequence, on equal and ragged shards. Skips without PyTorch (CI has
none; the GPU test runs the real kernels)."""

import datetime
import os
import sys
import unittest

from gloo_support import OneRankGroup, run_ranks

try:
    import torch
    import torch.distributed as dist
except ImportError:
    torch = None


def definitions():
    """Two DSL definitions whose q_mod the one-pass scheme must evaluate:
    a per-token scale of q (the scaled product) and a function of q (q_mod
    evaluated as it is)."""
    from attnc import dsl
    from attnc.dsl import InputShape

    scaled = dsl.LinearAttentionDef("gla_q_scaled")
    scaled.inputs.declare("qs", InputShape.PerRow, 0.5, 1.5)
    scaled.q_mod = lambda x, i, b, h, t: x * i["qs"] * i.head_dim().rsqrt()
    scaled.decay_mod = lambda x, i, b, h, t: x
    feature = dsl.LinearAttentionDef("gla_q_sigmoid")
    feature.inputs.declare("w", InputShape.PerHead, 0.5, 1.5)
    feature.q_mod = lambda x, i, b, h, t: x.sigmoid() * i["w"] - 0.25
    feature.decay_mod = lambda x, i, b, h, t: x
    return {"gla_q_scaled": scaled.build(), "gla_q_sigmoid": feature.build()}


def fake_linear(q, k, v, definition, decay=None, inputs=None,
                initial_state=None, layout=None, return_final_state=False):
    """simple_gla, mamba2 and the definitions above as the token recurrence
    in float64, layouts bshd and bhsd, q and k heads repeated to v's."""
    inputs = inputs or {}
    if layout == "bhsd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    b, n, h, dv = v.shape
    q, k = (t.repeat_interleave(h // t.shape[2], 2) for t in (q, k))
    g = decay
    if definition == "mamba2":
        g = inputs["dt"] * inputs["A"][None, :, None]
        v = v * inputs["dt"].transpose(1, 2)[..., None]
    elif definition == "gla_q_scaled":
        q = q * inputs["qs"].transpose(1, 2)[..., None] / q.shape[-1] ** 0.5
    elif definition == "gla_q_sigmoid":
        q = torch.sigmoid(q) * inputs["w"][None, None, :, None] - 0.25
    else:
        q = q / q.shape[-1] ** 0.5
    state = (q.new_zeros((b, h, q.shape[-1], dv)) if initial_state is None
             else initial_state)
    outs = []
    for t in range(n):
        state = (torch.exp(g[:, :, t])[..., None, None] * state
                 + k[:, t, :, :, None] * v[:, t, :, None, :])
        outs.append(torch.einsum("bhd,bhde->bhe", q[:, t], state))
    out = torch.stack(outs, 1)
    if layout == "bhsd":
        out = out.transpose(1, 2)
    return (out, state) if return_final_state else out


def cuts(world, ragged):
    """Shard boundaries: 6 tokens each, or 3 + 2r tokens on rank r."""
    lens = [3 + 2 * r if ragged else 6 for r in range(world)]
    return [sum(lens[:r]) for r in range(world + 1)]


# (definition, initial state, dt and A learnable, ragged shards, layout,
# q heads)
CASES = [("simple_gla", False, True, False, "bshd", 3),
         ("simple_gla", True, True, True, "bshd", 3),
         ("mamba2", False, True, True, "bshd", 3),
         ("mamba2", True, True, False, "bshd", 1),
         # constant dt and A: the last rank's (A, S) need no gradient, and
         # its state passing must still join the backward.
         ("mamba2", False, False, True, "bshd", 3),
         ("gla_q_scaled", True, True, True, "bhsd", 3),
         ("gla_q_sigmoid", False, True, True, "bshd", 1),
         ("gla_q_sigmoid", True, True, False, "bhsd", 3)]


def _worker(rank, world, port, errors):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # A collective one rank skips fails after the timeout instead of hanging.
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        import attnc.torch
        from attnc import distributed as ad

        for name, definition in definitions().items():
            attnc.torch.register(definition)
        ad._attnc_torch.linear_attention = fake_linear
        b, h, d, dv = 2, 3, 4, 5
        for name, with_initial, learn, ragged, layout, hq in CASES:
            check_case(ad, rank, world, errors, name, with_initial, learn,
                       ragged, layout, b, h, hq, d, dv)
    except Exception as e:  # reported by the parent
        import traceback
        errors.put(f"rank {rank}: {type(e).__name__}: {e}\n"
                   f"{traceback.format_exc()}")
    finally:
        dist.destroy_process_group()


def check_case(ad, rank, world, errors, name, with_initial, learn, ragged,
               layout, b, h, hq, d, dv):
    torch.manual_seed(7)  # the same on every rank
    bounds = cuts(world, ragged)
    n = bounds[-1]
    seq = 1 if layout == "bshd" else 2  # q, k, v's token dim
    shape = (lambda heads, dim: (b, n, heads, dim) if layout == "bshd"
             else (b, heads, n, dim))
    q, k = (torch.randn(shape(hq, d), dtype=torch.float64) for _ in range(2))
    v, dout = (torch.randn(shape(h, dv), dtype=torch.float64)
               for _ in range(2))
    decay = torch.rand(b, h, n, dtype=torch.float64) * -1.0
    dt = torch.rand(b, h, n, dtype=torch.float64) + 0.05
    a_head = -0.2 - torch.rand(h, dtype=torch.float64)
    qs = torch.rand(b, h, n, dtype=torch.float64) + 0.5
    w = torch.rand(h, dtype=torch.float64) + 0.5
    init = torch.randn(b, h, d, dv, dtype=torch.float64)
    dfinal = torch.randn(b, h, d, dv, dtype=torch.float64)
    leaves = [t.clone().requires_grad_()
              for t in (q, k, v, decay, dt, a_head, qs, w, init)]
    wq, wk, wv, wdecay, wdt, wa, wqs, ww, winit = leaves
    whole_inputs = {"mamba2": {"dt": wdt, "A": wa},
                    "gla_q_scaled": {"qs": wqs},
                    "gla_q_sigmoid": {"w": ww}}.get(name)
    out, final = fake_linear(wq, wk, wv, name, wdecay, whole_inputs,
                             winit if with_initial else None, layout, True)
    (out * dout).sum().backward(retain_graph=True)
    (final * dfinal).sum().backward()
    lo, hi = bounds[rank], bounds[rank + 1]

    def mine(t):
        return t.narrow(seq, lo, hi - lo)

    ml = [mine(t).clone().requires_grad_() for t in (q, k, v)]
    mdecay, mdt, mqs = (t[..., lo:hi].clone().requires_grad_()
                        for t in (decay, dt, qs))
    ma, mw = a_head.clone().requires_grad_(), w.clone().requires_grad_()
    if not learn:
        mdt, ma = mdt.detach(), ma.detach()
    minit = init.clone().requires_grad_()
    inputs = {"mamba2": {"dt": mdt, "A": ma}, "gla_q_scaled": {"qs": mqs},
              "gla_q_sigmoid": {"w": mw}}.get(name)
    got, got_final = ad.linear_attention_cp(
        *ml, name, decay=mdecay, inputs=inputs,
        initial_state=minit if with_initial else None, layout=layout,
        return_final_state=True)
    loss = (got * mine(dout)).sum()
    if rank == world - 1:  # the sequence's final state
        loss = loss + (got_final * dfinal).sum()
    loss.backward()
    # Per-head gradients are partial per rank: the sum over ranks is the
    # whole's (the initial state's is rank 0's).
    for t in (ma, mw, minit):
        if not t.requires_grad:
            continue
        if t.grad is None:
            t.grad = torch.zeros_like(t)
        dist.all_reduce(t.grad)
    uses_decay = name != "mamba2"
    pairs = [("out", got, mine(out))]
    pairs += [(what, g.grad, mine(r.grad)) for what, g, r in
              zip(("dq", "dk", "dv"), ml, (wq, wk, wv))]
    if uses_decay:
        pairs.append(("ddecay", mdecay.grad, wdecay.grad[..., lo:hi]))
    if name == "mamba2" and learn:
        pairs += [("ddt", mdt.grad, wdt.grad[..., lo:hi]),
                  ("dA", ma.grad, wa.grad)]
    if name == "gla_q_scaled":
        pairs.append(("dqs", mqs.grad, wqs.grad[..., lo:hi]))
    if name == "gla_q_sigmoid":
        pairs.append(("dw", mw.grad, ww.grad))
    if with_initial:
        pairs.append(("dinit", minit.grad, winit.grad))
    if rank == world - 1:
        pairs.append(("final", got_final, final))
    for what, g, r in pairs:
        label = (f"rank {rank}/{world} {name} init={with_initial} "
                 f"ragged={ragged} {layout} hq={hq} {what}")
        if g is None or r is None:
            errors.put(f"{label}: missing")
            continue
        err = (g.detach() - r.detach()).abs().max().item()
        # The state passing's float32 (attnc's states are), the rest
        # float64.
        if not err < 1e-5 * (1 + r.abs().max().item()):
            errors.put(f"{label}: {err}")


@unittest.skipIf(torch is None, "needs PyTorch")
class GlooLinear(unittest.TestCase):
    def run_ranks(self, world):
        run_ranks(self, _worker, world)

    def test_one_rank(self):
        self.run_ranks(1)

    def test_two_ranks(self):
        self.run_ranks(2)

    def test_three_ranks(self):
        self.run_ranks(3)

    def test_four_ranks(self):
        self.run_ranks(4)


@unittest.skipIf(torch is None, "needs PyTorch")
class Arguments(OneRankGroup, unittest.TestCase):
    """linear_attention_cp's refusals, in one gloo process."""

    def test_refusals(self):
        import attnc
        from attnc import distributed as ad

        q = torch.zeros(1, 8, 2, 4)
        with self.assertRaises(attnc.NotSupportedYet) as e:
            ad.linear_attention_cp(q, q, q, "mha")
        self.assertIn("is not linear attention", str(e.exception))
        with self.assertRaises(attnc.InvalidArgument) as e:
            ad.linear_attention_cp(q, q, q, "simple_gla", layout="thd")
        self.assertIn("layout 'thd' is not one of", str(e.exception))



if __name__ == "__main__":
    sys.exit(unittest.main())
