"""The DSL's building blocks in Python (attnc.dsl.masks, score_mods,
online_softmax): each traces what the same definition written out by hand
traces, in the C++ blocks' order, and nonsense parameters are refused by
name. (tests/python/dsl_twins.py compares the blocks with the C++ ones
through the shipped examples.)"""

import unittest

from attnc import dsl
from attnc.dsl import InputShape, masks, online_softmax, score_mods


def ir(d):
    return d.build().ir(after="trace")


class Blocks(unittest.TestCase):
    def test_score_mod_chain_is_the_formula_written_out(self):
        blocks = dsl.AttentionDef("chain", score_mod=score_mods.then(
            score_mods.then(score_mods.scaled(), score_mods.alibi("slopes")),
            score_mods.softcap(30.0)), online_func=online_softmax())
        blocks.inputs.declare("slopes", InputShape.PerHead)

        def by_hand(score, inputs, b, h, q_idx, kv_idx):
            s = score * inputs.head_dim().rsqrt()
            distance = kv_idx - q_idx
            s = s + inputs["slopes"] * distance
            return (s / 30.0).tanh() * 30.0

        hand = dsl.AttentionDef("chain", score_mod=by_hand,
                                online_func=online_softmax())
        hand.inputs.declare("slopes", InputShape.PerHead)
        self.assertEqual(ir(blocks), ir(hand))
        self.assertIn("tanh", ir(blocks))

    def test_both_and_either_combine_masks_with_and_without_inputs(self):
        def first_key(b, h, q_idx, kv_idx):
            return kv_idx == 0

        blocks = dsl.AttentionDef(
            "combined", score_mod=score_mods.scaled(),
            mask_mod=masks.either(masks.both(masks.prefix_lm("P"),
                                             masks.sliding_window(8)),
                                  first_key),
            online_func=online_softmax())
        blocks.inputs.declare("P", InputShape.Scalar, dsl.InputType.I32)

        def by_hand(b, h, q_idx, kv_idx, inputs):
            prefix = (q_idx >= kv_idx) | (kv_idx < inputs["P"])
            window = (q_idx >= kv_idx) & (q_idx - kv_idx < 8)
            return (prefix & window) | (kv_idx == 0)

        hand = dsl.AttentionDef("combined", score_mod=score_mods.scaled(),
                                mask_mod=by_hand, online_func=online_softmax())
        hand.inputs.declare("P", InputShape.Scalar, dsl.InputType.I32)
        self.assertEqual(ir(blocks), ir(hand))

    def test_derived_and_written_backward_are_both_accepted(self):
        for written in (True, False):
            d = dsl.AttentionDef("sm", score_mod=score_mods.scaled(),
                                 mask_mod=masks.causal(),
                                 online_func=online_softmax(written))
            text = ir(d)
            self.assertEqual("func backward {" in text, written, text)

    def test_the_flexattention_migration_example_builds(self):
        # docs/python.md, "Coming from FlexAttention", as written there.
        d = dsl.AttentionDef("softcap_window",
                             score_mod=score_mods.then(
                                 score_mods.scaled(), score_mods.softcap(30.0)),
                             mask_mod=masks.sliding_window(1024),
                             online_func=online_softmax())
        text = d.build().ir(after="dce")
        self.assertIn("tanh", text)
        self.assertIn("const 1024", text)

    def test_nonsense_parameters_are_refused_by_name(self):
        for window in (0, -2, 2.5, True):
            with self.assertRaisesRegex(ValueError, "masks.sliding_window"):
                masks.sliding_window(window)
        for cap in (0, -1.0, float("nan"), float("inf"), "30"):
            with self.assertRaisesRegex(ValueError, "score_mods.softcap"):
                score_mods.softcap(cap)


if __name__ == "__main__":
    unittest.main()
