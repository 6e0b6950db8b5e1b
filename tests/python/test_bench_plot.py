"""tools/bench/plot.py: the headline table from bench JSON lines (attnc
against the best peer of each shape; a rerun replaces a row; GB/s for the
memory-bound benches' rows), and the plots when matplotlib is installed."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

PLOT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "bench",
                    "plot.py")


def row(impl, S, tflops, mask="causal"):
    return {"bench": "fwd", "impl": impl, "variant": "mha", "dtype": "f16",
            "mask": mask, "config": "", "B": 16384 // S, "H": 32, "S": S,
            "D": 128, "DV": 128, "ms": 1.0, "tflops": tflops,
            "card": "NVIDIA H100 80GB HBM3", "date": "2026-11-27"}


class PlotTable(unittest.TestCase):
    def run_plot(self, rows, *args):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.jsonl")
            with open(path, "w") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
            out = subprocess.run([sys.executable, PLOT, path, *args, tmp],
                                 capture_output=True, text=True)
            return out, sorted(os.listdir(tmp))

    def test_table_compares_with_the_best_peer(self):
        rows = [row("attnc", 1024, 500), row("sdpa-cudnn", 1024, 400),
                row("sdpa-flash", 1024, 450), row("attnc", 4096, 600),
                row("sdpa-cudnn", 4096, 700), row("attnc", 4096, 630)]
        out, _ = self.run_plot(rows, "--table", "-o")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| fwd | causal | f16 | B16 H32 S1024 D128 | 500 | "
                      "sdpa-flash | 450 | 1.11× |", out.stdout)
        # The rerun (630) replaced the first attnc row of S = 4096.
        self.assertIn("| fwd | causal | f16 | B4 H32 S4096 D128 | 630 | "
                      "sdpa-cudnn | 700 | 0.90× |", out.stdout)

    def test_a_shape_without_peers_says_so(self):
        out, _ = self.run_plot([row("attnc", 1024, 500)], "--table", "-o")
        self.assertIn("| 500 | — | — | — |", out.stdout)

    def test_memory_bound_rows_compare_gbps(self):
        # What attnc_bench_decode, attnc_bench_linear and `attnc bench` on a
        # linear definition write: GB/s and no TFLOPS.
        def gb(bench, impl, S, gbps, mask):
            r = row(impl, S, 0, mask=mask)
            r.update(bench=bench, variant="mamba2", gbps=gbps)
            return r
        rows = [gb("linear_fwd", "attnc", 4096, 1800.0, "none"),
                gb("linear_fwd", "fla", 4096, 1500.0, "none"),
                gb("decode", "attnc", 8192, 2900.0, "paged16")]
        out, _ = self.run_plot(rows, "--table", "-o")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| linear_fwd | none | f16 | B4 H32 S4096 D128 | "
                      "1800 GB/s | fla | 1500 GB/s | 1.20× |", out.stdout)
        self.assertIn("| decode | paged16 | f16 | B2 H32 S8192 D128 | "
                      "2900 GB/s | — | — | — |", out.stdout)

    def test_rows_of_every_bench_load(self):
        # One row as each C++ bench writes it (BenchJson.h's keys), "gbps"
        # only where measured: the table takes them all.
        masks = row("attnc", 2048, 410.5, mask="document")
        masks.update(bench="masks_fwd", variant="document")
        fwdbwd = dict(masks, bench="masks_fwdbwd", tflops=380.0)
        cli = row("attnc", 1024, 350.0, mask="masked")
        out, _ = self.run_plot([masks, fwdbwd, cli], "--table", "-o")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| masks_fwd | document | f16 | B8 H32 S2048 D128 | 410 |",
                      out.stdout)
        self.assertIn("| masks_fwdbwd | document |", out.stdout)
        self.assertIn("| fwd | masked | f16 | B16 H32 S1024 D128 | 350 |",
                      out.stdout)

    def test_plots_gbps_groups(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib is not installed")
        r = row("attnc", 4096, 0, mask="none")
        r.update(bench="linear_fwd", gbps=1800.0)
        out, files = self.run_plot([r], "-o")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("linear_fwd_none_f16_d128.png", files)

    def test_no_rows_is_an_error(self):
        out, _ = self.run_plot([], "--table", "-o")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("no rows", out.stderr)

    def test_plots_one_png_per_group(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib is not installed")
        rows = [row("attnc", 1024, 500), row("sdpa-cudnn", 1024, 400),
                row("attnc", 1024, 300, mask="full")]
        out, files = self.run_plot(rows, "-o")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("fwd_causal_f16_d128.png", files)
        self.assertIn("fwd_full_f16_d128.png", files)


if __name__ == "__main__":
    unittest.main()
