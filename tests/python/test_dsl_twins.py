"""Definitions written in Python trace into the same IR as their C++ twins
(dsl_examples/*.cpp), print the same, and generate the same kernels."""

import unittest

import attnc
from dsl_twins import TWINS


class Twins(unittest.TestCase):
    def test_every_twin_prints_the_examples_ir_exactly(self):
        for name, make in TWINS.items():
            with self.subTest(name):
                python = make().build()
                self.assertEqual(python.name, name)
                self.assertEqual(python.ir(), attnc.example(name).ir())

    def test_every_twin_saves_the_examples_ir_json_exactly(self):
        for name, make in TWINS.items():
            with self.subTest(name):
                self.assertEqual(make().build().ir_json(),
                                 attnc.example(name).ir_json())

    def test_twins_generate_the_examples_kernels(self):
        for name, options in (
            ("mha", dict(arch="sm_80", head_dim=64)),
            ("mha", dict(arch="sm_90a", backward=True)),
            ("alibi_learnable", dict(arch="sm_80", backward=True)),
            ("mha_document_ids", dict(arch="sm_90a", dtype="bf16")),
            ("mamba2", dict(arch="sm_80")),
        ):
            with self.subTest(name=name, **options):
                self.assertEqual(TWINS[name]().build().emit(**options),
                                 attnc.example(name).emit(**options))

    def test_a_twin_differing_in_one_constant_prints_differently(self):
        d = TWINS["relu_attn"]()
        d.score_mod = lambda score, inputs, b, h, q, k: (
            score * inputs.head_dim().rsqrt()).max(0.5)
        self.assertNotEqual(d.build().ir(), attnc.example("relu_attn").ir())

    def test_kinds(self):
        self.assertEqual(TWINS["mha"]().build().kind, "attention")
        self.assertEqual(TWINS["mamba2"]().build().kind, "linear")


if __name__ == "__main__":
    unittest.main()
