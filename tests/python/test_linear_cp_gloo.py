"""attnc.distributed.linear_attention_cp on the CPU (gloo, 2 and 3
processes), its attnc.torch.linear_attention calls replaced by a float64
torch token recurrence with the same contract (initial state in, final
state out, differentiable in everything): the differentiable all-gather,
the scan, the second pass and the autograd wiring (rank 0's final state
receiving its gradient from the later ranks), forward and gradients of q,
k, v, the decay, mamba2's dt and A and the sequence's initial state against
the recurrence over the whole sequence. Skips without PyTorch (CI has
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


def fake_linear(q, k, v, definition, decay=None, inputs=None,
                initial_state=None, layout=None, return_final_state=False):
    """simple_gla or mamba2 (bshd) as the token recurrence in float64."""
    inputs = inputs or {}
    if definition == "mamba2":
        g = inputs["dt"] * inputs["A"][None, :, None]
        v = v * inputs["dt"].transpose(1, 2)[..., None]
    else:
        g = decay
        q = q / q.shape[-1] ** 0.5
    b, n, h, dv = v.shape
    state = (q.new_zeros((b, h, q.shape[-1], dv)) if initial_state is None
             else initial_state)
    outs = []
    for t in range(n):
        state = (torch.exp(g[:, :, t])[..., None, None] * state
                 + k[:, t, :, :, None] * v[:, t, :, None, :])
        outs.append(torch.einsum("bhd,bhde->bhe", q[:, t], state))
    out = torch.stack(outs, 1)
    return (out, state) if return_final_state else out


def _worker(rank, world, port, errors):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # A collective one rank skips fails after the timeout instead of hanging.
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        from attnc import distributed as ad

        ad._attnc_torch.linear_attention = fake_linear
        b, h, d, dv = 2, 3, 4, 5
        # mamba2 also with constant dt and A: then the last rank's (A, S)
        # need no gradient, and its gather must still join the backward.
        for name, with_initial, learn in (
                ("simple_gla", False, True), ("simple_gla", True, True),
                ("mamba2", False, True), ("mamba2", True, True),
                ("mamba2", False, False)):
            torch.manual_seed(7)  # the same on every rank
            n = 6 * world
            q, k = (torch.randn(b, n, h, d, dtype=torch.float64)
                    for _ in range(2))
            v, dout = (torch.randn(b, n, h, dv, dtype=torch.float64)
                       for _ in range(2))
            decay = torch.rand(b, h, n, dtype=torch.float64) * -1.0
            dt = torch.rand(b, h, n, dtype=torch.float64) + 0.05
            a_head = -0.2 - torch.rand(h, dtype=torch.float64)
            init = torch.randn(b, h, d, dv, dtype=torch.float64)
            dfinal = torch.randn(b, h, d, dv, dtype=torch.float64)
            leaves = [t.clone().requires_grad_()
                      for t in (q, k, v, decay, dt, a_head, init)]
            wq, wk, wv, wdecay, wdt, wa, winit = leaves
            out, final = fake_linear(
                wq, wk, wv, name, wdecay, {"dt": wdt, "A": wa},
                winit if with_initial else None, None, True)
            (out * dout).sum().backward(retain_graph=True)
            (final * dfinal).sum().backward()
            lo, hi = rank * n // world, (rank + 1) * n // world
            mine = [t[:, lo:hi].clone().requires_grad_()
                    for t in (q, k, v)]
            mdecay, mdt = (t[..., lo:hi].clone().requires_grad_()
                           for t in (decay, dt))
            ma = a_head.clone().requires_grad_()
            if not learn:
                mdt, ma = mdt.detach(), ma.detach()
            minit = init.clone().requires_grad_()
            got, got_final = ad.linear_attention_cp(
                *mine, name, decay=mdecay, inputs={"dt": mdt, "A": ma},
                initial_state=minit if with_initial else None,
                return_final_state=True)
            loss = (got * dout[:, lo:hi]).sum()
            if rank == world - 1:  # the sequence's final state
                loss = loss + (got_final * dfinal).sum()
            loss.backward()
            # Per-head gradients are partial per rank: the sum over
            # ranks is the whole's (the initial state's is rank 0's).
            for t in (ma, minit):
                if not t.requires_grad:
                    continue
                if t.grad is None:
                    t.grad = torch.zeros_like(t)
                dist.all_reduce(t.grad)
            checks = [("out", got, out[:, lo:hi])]
            checks += [(w, g.grad, r.grad[:, lo:hi]) for w, g, r in
                       zip(("dq", "dk", "dv"), mine, (wq, wk, wv))]
            checks += [("ddecay", mdecay.grad if name == "simple_gla"
                        else None, wdecay.grad[..., lo:hi]
                        if name == "simple_gla" else None),
                       ("ddt", mdt.grad if name == "mamba2" and learn
                        else None, wdt.grad[..., lo:hi]
                        if name == "mamba2" and learn else None),
                       ("dA", ma.grad if name == "mamba2" and learn
                        else None, wa.grad if name == "mamba2" and learn
                        else None),
                       ("dinit", minit.grad if with_initial else None,
                        winit.grad if with_initial else None)]
            if rank == world - 1:
                checks.append(("final", got_final, final))
            for what, g, r in checks:
                if g is None and r is None:
                    continue
                if g is None or r is None:
                    errors.put(f"rank {rank} {name} {what}: missing")
                    continue
                err = (g.detach() - r.detach()).abs().max().item()
                # A is float32 (attnc's), the rest float64.
                if not err < 1e-5 * (1 + r.abs().max().item()):
                    errors.put(f"rank {rank} {name} init={with_initial}"
                               f" {what}: {err}")
    except Exception as e:  # reported by the parent
        import traceback
        errors.put(f"rank {rank}: {type(e).__name__}: {e}\n"
                   f"{traceback.format_exc()}")
    finally:
        dist.destroy_process_group()



@unittest.skipIf(torch is None, "needs PyTorch")
class GlooLinear(unittest.TestCase):
    def run_ranks(self, world):
        run_ranks(self, _worker, world)

    def test_two_ranks(self):
        self.run_ranks(2)

    def test_three_ranks(self):
        self.run_ranks(3)


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
