"""The Python package loads libattnc_c and reaches the shipped examples."""

import unittest

import attnc


class ExampleDefinitions(unittest.TestCase):
    def test_examples_are_listed_in_order(self):
        names = attnc.examples()
        self.assertIn("mha", names)
        self.assertIn("mamba2", names)
        self.assertEqual(names[0], "mha")
        self.assertEqual(len(names), len(set(names)))

    def test_example_by_name(self):
        d = attnc.example("sigmoid_attn")
        self.assertEqual(d.name, "sigmoid_attn")

    def test_unknown_example_is_a_user_error_listing_the_names(self):
        with self.assertRaises(attnc.UserError) as caught:
            attnc.example("no_such_variant")
        self.assertIn("no_such_variant", str(caught.exception))
        self.assertIn("mha", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
