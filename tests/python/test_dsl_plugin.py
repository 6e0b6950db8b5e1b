"""A plugin of C++ definitions (attnc_add_plugin, tests/capi) loads from
Python, and a plugin that fails says why."""

import os
import unittest

import attnc

PLUGIN = os.environ.get("ATTNC_TEST_PLUGIN", "")
FAILING = os.environ.get("ATTNC_TEST_PLUGIN_FAILING", "")


@unittest.skipUnless(os.path.isfile(PLUGIN), "ATTNC_TEST_PLUGIN not set")
class Plugins(unittest.TestCase):
    def test_its_definitions_in_order(self):
        defs = attnc.load_plugin(PLUGIN)
        self.assertEqual([d.name for d in defs],
                         ["plugin_temperature", "plugin_gla"])
        self.assertEqual([d.kind for d in defs], ["attention", "linear"])

    def test_they_compile_print_and_check(self):
        temperature, gla = attnc.load_plugin(PLUGIN)
        text = temperature.ir()
        self.assertTrue(text.startswith("// ----- IR after trace -----"))
        self.assertIn("temperature", text)
        self.assertIn("all checks passed", temperature.check())
        self.assertIn("plugin_gla", gla.emit(arch="sm_80"))
        # Its printed IR is a traced definition's: the same as a Python
        # definition of the same variant.
        self.assertEqual(gla.ir().replace("plugin_gla", "simple_gla"),
                         attnc.example("simple_gla").ir())

    def test_the_definitions_outlive_the_plugin_list(self):
        d = attnc.load_plugin(PLUGIN)[1]
        self.assertEqual(d.kind, "linear")
        self.assertIn("decay_mod", d.ir_json())

    @unittest.skipUnless(os.path.isfile(FAILING), "no failing plugin")
    def test_a_failing_plugin_reports_its_message(self):
        with self.assertRaisesRegex(attnc.UserError, "plugin '.*': "
                                    "definition 'twice' is registered twice"):
            attnc.load_plugin(FAILING)

    def test_not_a_plugin(self):
        with self.assertRaisesRegex(attnc.UserError, "it has no "
                                    "attnc_plugin_graphs_v1 function"):
            attnc.load_plugin(attnc._lib.library_path)
        with self.assertRaisesRegex(attnc.UserError, "cannot load it"):
            attnc.load_plugin("/nonexistent/plugin.so")


if __name__ == "__main__":
    unittest.main()
