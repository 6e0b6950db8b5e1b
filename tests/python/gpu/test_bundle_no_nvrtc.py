"""A deployed program without NVRTC: a bundle made by `attnc bundle` serves
attnc.torch.attention's forward and backward kernels in a process where NVRTC
cannot be loaded (ATTNC_NVRTC_LIBRARY names no file) and the kernel cache is
empty; results are checked against the fp64 reference, and a call the bundle
does not cover fails with the message that says so.

Run (GPU machine): ATTNC_CLI=.../attnc PYTHONPATH=python:tests/python/gpu
ATTNC_LIBRARY=.../libattnc_c.so python -m unittest -v
tests/python/gpu/test_bundle_no_nvrtc.py"""

import os
import subprocess
import sys
import tempfile
import unittest

from gpu_support import HAVE_GPU, needs_gpu, torch

CLI = os.environ.get("ATTNC_CLI", "")

# Runs in the child, the process without NVRTC.
CHILD = r"""
import sys, torch, attnc, attnc.torch
from gpu_support import reference, check_close
import unittest

class Case(unittest.TestCase):
    def test(self):
        self._dtype = torch.float16
        torch.manual_seed(3)
        q, k, v = (torch.randn(2, 4, 300, 64, device="cuda").half()
                   .requires_grad_() for _ in range(3))
        out = attnc.torch.attention(q, k, v, "mha")
        dout = torch.randn_like(out)
        got = torch.autograd.grad(out, [q, k, v], dout)
        res = {}
        for dt in (torch.float64, torch.float16):
            qq, kk, vv = (t.detach().to(dt).requires_grad_() for t in (q, k, v))
            o = reference("mha", qq, kk, vv, {})
            res[dt] = (o, torch.autograd.grad(o, [qq, kk, vv], dout.to(dt)))
        check_close(self, "out", out.detach(), res[torch.float64][0].detach(),
                    res[torch.float16][0].detach())
        for i, label in enumerate(("dq", "dk", "dv")):
            check_close(self, label, got[i], res[torch.float64][1][i],
                        res[torch.float16][1][i])
        # head dim 128 is not in the bundle: no NVRTC to compile it.
        q2, k2, v2 = (torch.randn(1, 2, 64, 128, device="cuda").half()
                      for _ in range(3))
        with self.assertRaisesRegex(attnc.Error, "is in no loaded bundle"):
            attnc.torch.attention(q2, k2, v2, "mha")

r = unittest.TextTestRunner(verbosity=2).run(
    unittest.defaultTestLoader.loadTestsFromTestCase(Case))
sys.exit(0 if r.wasSuccessful() else 1)
"""


@needs_gpu
@unittest.skipUnless(os.path.isfile(CLI), "ATTNC_CLI (the attnc binary) not set")
class BundleWithoutNvrtc(unittest.TestCase):
    def test_forward_and_backward_from_a_bundle(self):
        major, minor = torch.cuda.get_device_capability()
        arch = {(8, 0): "sm_80", (9, 0): "sm_90a"}.get((major, minor))
        if arch is None:
            self.skipTest(f"compute capability {major}.{minor}")
        with tempfile.TemporaryDirectory() as tmp:
            # ATTNC_TEST_BUNDLE: one made beforehand by the same command on
            # a build machine (NVRTC's sm_90a compiles take minutes).
            bundle = os.environ.get("ATTNC_TEST_BUNDLE") or os.path.join(
                tmp, "mha.attncb")
            if not os.environ.get("ATTNC_TEST_BUNDLE"):
                subprocess.run([CLI, "bundle", "mha", "--arch", arch,
                                "--head-dim", "64", "--layout", "bshd,bhsd",
                                "--directions", "forward,backward", "-o",
                                bundle], check=True)
            env = dict(os.environ,
                       ATTNC_NVRTC_LIBRARY=os.path.join(tmp, "no-libnvrtc.so"),
                       ATTNC_BUNDLE=bundle,
                       ATTNC_CACHE_DIR=os.path.join(tmp, "empty-cache"))
            child = subprocess.run([sys.executable, "-c", CHILD], env=env,
                                   capture_output=True, text=True)
            self.assertEqual(child.returncode, 0,
                             child.stdout + child.stderr)
            # Nothing was written to the cache: every kernel came from the
            # bundle.
            self.assertFalse(os.path.exists(os.path.join(tmp, "empty-cache"))
                             and os.listdir(os.path.join(tmp, "empty-cache")))


if __name__ == "__main__":
    unittest.main()
