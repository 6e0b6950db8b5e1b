"""What the GPU tests of the Python package share: skipping cleanly, fp64
references of the examples, the project's tolerance rule, and running a
two-rank test file under torchrun."""

import math
import os
import subprocess
import sys
import unittest

try:
    import torch
except ImportError:  # the tests skip
    torch = None

HAVE_GPU = torch is not None and torch.cuda.is_available()
needs_gpu = unittest.skipUnless(HAVE_GPU, "needs PyTorch and a CUDA device")
TWO_GPUS = HAVE_GPU and torch.cuda.device_count() >= 2
needs_two_gpus = unittest.skipUnless(TWO_GPUS,
                                     "needs PyTorch and two CUDA devices")
FOUR_GPUS = HAVE_GPU and torch.cuda.device_count() >= 4
needs_four_gpus = unittest.skipUnless(FOUR_GPUS,
                                      "needs PyTorch and four CUDA devices")


def torchrun_two_ranks(test, path, ranks=2):
    """Runs the test file `path` as `ranks` ranks (two by default) under
    torchrun (its workers check and print); fails `test` with the tail of
    their stderr."""
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run",
         f"--nproc_per_node={ranks}", os.path.abspath(path)],
        capture_output=True, text=True, timeout=600)
    sys.stdout.write(run.stdout[-6000:])
    test.assertEqual(run.returncode, 0, run.stderr[-6000:])

if HAVE_GPU:
    import attnc
    import attnc.torch


def causal_mask(sq, skv, device):
    q = torch.arange(sq, device=device)[:, None]
    k = torch.arange(skv, device=device)[None, :]
    return q >= k


def scores(name, q, k, inputs):
    """The example's scores after score_mod and mask_mod (bhsd): masked
    elements -inf for the softmax variants, and whether it is one."""
    d = q.shape[-1]
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
    keep = causal_mask(q.shape[-2], k.shape[-2], q.device)
    if name == "sigmoid_attn":
        return torch.sigmoid(s + inputs["softmax_bias"]) * keep, False
    if name == "alibi_learnable":
        qi = torch.arange(q.shape[-2], device=q.device)[:, None]
        ki = torch.arange(k.shape[-2], device=q.device)[None, :]
        slopes = inputs["slopes"].to(s.dtype)[None, :, None, None]
        bias = inputs["head_bias"].to(s.dtype)[None, :, None, None]
        s = s + slopes * (ki - qi).to(s.dtype) + bias * (ki == qi).to(s.dtype)
    elif name != "mha":
        raise ValueError(name)
    return s.masked_fill(~keep, float("-inf")), True


def reference(name, q, k, v, inputs):
    """The example's definition evaluated directly (bhsd), in q's dtype
    (the 'plain' PyTorch computation) or in fp64 when given fp64."""
    s, softmax = scores(name, q, k, inputs)
    p = torch.softmax(s, dim=-1) if softmax else s
    return p.to(v.dtype) @ v


def doosum_only_input_grads(name, q, k, v, inputs, dout, dtype, leaves):
    """Input gradients in fp64 with one rounding: doosum = rowsum(dO*O)
    from the output rounded to dtype (tests/gpu/BackwardCheck.h's
    PlainDoosum). On a gradient summed over every element (a per-head
    input) the plain computation's other roundings can cancel this part by
    chance, so the yardstick is the larger of the two errors."""
    q, k, v, dout = (t.detach().double() for t in (q, k, v, dout))
    ins = {n: t.detach().double().requires_grad_(n in leaves)
           if isinstance(t, torch.Tensor) else t for n, t in inputs.items()}
    s, softmax = scores(name, q, k, ins)
    assert softmax, "doosum is the softmax backward's"
    p = torch.softmax(s, dim=-1).detach()
    o = p @ v
    doosum = (dout * o.to(dtype).double()).sum(-1, keepdim=True)
    ds = p * (dout @ v.transpose(-1, -2) - doosum)
    return torch.autograd.grad(s, [ins[n] for n in leaves], ds)


def atol(dtype):
    return 1e-3 if dtype == torch.float16 else 8e-3


def check_close(test, what, got, ref64, plain, plain_doosum=None):
    """The project's rule (tests/gpu): |got - ref| <= 2 * (the plain
    computation's max error) + atol * (1 + |ref|), elementwise; for an
    input gradient the plain error is the larger of plain's and of
    doosum_only_input_grads'."""
    got, plain = got.double(), plain.double()
    plain_err = (plain - ref64).abs().max().item()
    if plain_doosum is not None:
        plain_err = max(plain_err,
                        (plain_doosum.double() - ref64).abs().max().item())
    excess = ((got - ref64).abs()
              - atol_for(got_dtype=test._dtype) * (1 + ref64.abs()))
    worst = excess.max().item()
    test.assertLessEqual(
        worst, 2 * plain_err,
        f"{what}: max error beyond atol {worst:.3g} > 2 x plain error "
        f"{plain_err:.3g}")
    # Never a vacuous comparison: the reference is not all zeros.
    test.assertGreater(ref64.abs().max().item(), 0.0, what)


def atol_for(got_dtype):
    return atol(got_dtype)
