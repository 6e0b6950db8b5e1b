# lit configuration of the FileCheck tests over attnc's output. ctest runs lit
# on one .test file per test (CMakeLists.txt here), naming the programs with
# --param: attnc, bad_registry, filecheck, and exec_root (where %t lives).
import os
import sys

import lit.formats

config.name = 'attnc-filecheck'
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = ['.test']
config.test_source_root = os.path.dirname(__file__)


def param(name):
    value = lit_config.params.get(name)
    if not value:
        lit_config.fatal('missing --param %s=PATH' % name)
    return value


config.test_exec_root = param('exec_root')

# %exits N CMD...: CMD must exit with status N (exits.py says how its
# output is passed on).
exits = os.path.join(config.test_source_root, 'exits.py')
config.substitutions.append(('%exits', '"%s" "%s"' % (sys.executable, exits)))
config.substitutions.append(('%attnc', '"%s"' % param('attnc')))
config.substitutions.append(('%bad_registry', '"%s"' % param('bad_registry')))
config.substitutions.append(
    (r'\bFileCheck\b', '"%s" --dump-input=fail' % param('filecheck')))

# attnc finds its kernel cache as it does for the user who runs the tests
# (lit passes almost no environment on by default).
for var in ('HOME', 'XDG_CACHE_HOME', 'ATTNC_CACHE_DIR'):
    if var in os.environ:
        config.environment[var] = os.environ[var]
