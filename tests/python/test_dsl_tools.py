"""A definition's IR, JSON, CUDA, NVRTC compile and reference check from
Python are the CLI's (attnc show/emit/compile/check), and IR JSON files
are definitions."""

import os
import subprocess
import tempfile
import unittest

# The kernel cache of these tests is their own (read when first used).
_CACHE = tempfile.TemporaryDirectory(prefix="attnc-test-cache-")
os.environ["ATTNC_CACHE_DIR"] = _CACHE.name

import attnc  # noqa: E402
from dsl_twins import TWINS  # noqa: E402

CLI = os.environ.get("ATTNC_CLI", "")


def cli(*args) -> str:
    return subprocess.run([CLI, *args], check=True, capture_output=True,
                          text=True).stdout


@unittest.skipUnless(os.path.isfile(CLI), "ATTNC_CLI (the attnc binary) not set")
class AsTheCli(unittest.TestCase):
    def test_ir_is_attnc_show(self):
        for name in ("mha", "mha_sliding_window", "simple_gla"):
            with self.subTest(name):
                self.assertEqual(attnc.example(name).ir(), cli("show", name))

    def test_ir_after_one_pass(self):
        self.assertEqual(attnc.example("retention").ir(after="autodiff"),
                         cli("show", "retention", "--after", "autodiff"))
        with self.assertRaisesRegex(attnc.UserError, "show: unknown pass "
                                    "'fold'; passes: trace, verify"):
            attnc.example("mha").ir(after="fold")

    def test_ir_json_is_attnc_show_json(self):
        self.assertEqual(attnc.example("alibi_learnable").ir_json(),
                         cli("show", "alibi_learnable", "--json"))

    def test_emit_is_attnc_emit(self):
        for name, args in (
            ("mha", ["--arch", "sm_90a", "--head-dim", "64"]),
            ("sigmoid_attn", ["--backward", "--dtype", "bf16"]),
            ("mha", ["--backend", "reference"]),
            ("mamba2", ["--standalone"]),
        ):
            with self.subTest(name=name, args=args):
                opts = {}
                it = iter(args)
                for a in it:
                    key = a[2:].replace("-", "_")
                    if key in ("backward", "standalone"):
                        opts[key] = True
                    else:
                        value = next(it)
                        opts[key] = int(value) if key == "head_dim" else value
                self.assertEqual(attnc.example(name).emit(**opts),
                                 cli("emit", name, *args))

    def test_check_report_is_attnc_checks(self):
        report = attnc.example("relu_attn").check(seed=7)
        self.assertIn("all checks passed", report)
        self.assertTrue(cli("check", "relu_attn", "--seed", "7")
                        .startswith(report))


class Compile(unittest.TestCase):
    def test_compile_with_nvrtc_without_a_gpu(self):
        d = TWINS["relu_attn"]().build()
        first = d.compile(arch="sm_80", head_dim=64)
        self.assertGreater(first["cubin_bytes"], 0)
        self.assertIn("relu_attn", first["kernel"])
        self.assertEqual(first["source"], "compiled")
        # The same kernel again comes from the cache, under the same key as
        # the C++ example's.
        again = attnc.example("relu_attn").compile(arch="sm_80", head_dim=64)
        self.assertEqual(again["key"], first["key"])
        self.assertNotEqual(again["source"], "compiled")


@unittest.skipUnless(os.path.isfile(CLI), "ATTNC_CLI (the attnc binary) not set")
class Bundles(unittest.TestCase):
    def test_a_loaded_bundle_serves_its_kernels(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "sigmoid.attncb")
            cli("bundle", "sigmoid_attn", "--arch", "sm_86", "--dtype", "bf16",
                "--head-dim", "64", "-o", path)
            attnc.load_bundle(path)
            got = attnc.example("sigmoid_attn").compile(
                arch="sm_86", dtype="bf16", head_dim=64)
            self.assertEqual(got["source"], "bundle")
            self.assertGreater(got["cubin_bytes"], 0)

    def test_a_bad_bundle_is_refused_by_name(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad.attncb")
            with open(path, "wb") as f:
                f.write(b"not a bundle, just some bytes that are long enough")
            with self.assertRaisesRegex(attnc.UserError,
                                        "bundle '.*bad.attncb': not a kernel "
                                        "bundle"):
                attnc.load_bundle(path)
            with self.assertRaisesRegex(attnc.UserError, "cannot read it"):
                attnc.load_bundle(os.path.join(tmp, "missing.attncb"))


class IrJsonDefinitions(unittest.TestCase):
    def test_a_definition_from_ir_json_generates_the_same_kernels(self):
        for name in ("mha", "alibi_learnable", "mha_document_ids", "mamba2"):
            with self.subTest(name):
                original = attnc.example(name)
                loaded = attnc.from_ir_json(original.ir_json())
                self.assertEqual(loaded.name, name)
                self.assertEqual(loaded.kind, original.kind)
                self.assertEqual(loaded.ir_json(), original.ir_json())
                self.assertEqual(loaded.emit(arch="sm_90a"),
                                 original.emit(arch="sm_90a"))
                self.assertEqual(loaded.ir(after="dce"),
                                 original.ir(after="dce"))

    def test_its_first_pass_is_load(self):
        loaded = attnc.from_ir_json(attnc.example("mha").ir_json())
        self.assertTrue(loaded.ir().startswith("// ----- IR after load -----"))

    def test_from_a_file_and_checked(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "retention.json")
            with open(path, "w") as f:
                f.write(attnc.example("retention").ir_json())
            loaded = attnc.load_ir(path)
        self.assertIn("all checks passed", loaded.check())

    def test_a_broken_file_is_a_user_error(self):
        with self.assertRaisesRegex(attnc.UserError, "IR JSON"):
            attnc.from_ir_json('{"version": 1}')
        with self.assertRaises(TypeError):
            attnc.from_ir_json(b"{}")


if __name__ == "__main__":
    unittest.main()
