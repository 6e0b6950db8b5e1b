"""attnc without PyTorch: the package works, attnc.torch says what is
missing; where PyTorch is installed, the ops register (the GPU tests in
tests/python/gpu exercise them)."""

import importlib
import importlib.util
import sys
import unittest

import attnc

HAVE_TORCH = importlib.util.find_spec("torch") is not None


class TorchLayer(unittest.TestCase):
    @unittest.skipIf(HAVE_TORCH, "PyTorch is installed here")
    def test_without_torch_the_op_module_names_what_is_missing(self):
        with self.assertRaises(ImportError) as caught:
            importlib.import_module("attnc.torch")
        self.assertIn("torch", str(caught.exception))
        # The rest of the package does not need it.
        self.assertNotIn("torch", sys.modules)
        self.assertIn("mha", attnc.examples())

    @unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
    def test_the_ops_register(self):
        import torch

        import attnc.torch  # noqa: F401
        self.assertTrue(hasattr(torch.ops.attnc, "attention_fwd"))
        self.assertTrue(hasattr(torch.ops.attnc, "linear_fwd"))
        self.assertTrue(hasattr(torch.ops.attnc, "attention_bwd"))


if __name__ == "__main__":
    unittest.main()
