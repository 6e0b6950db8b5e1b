#!/usr/bin/env bash
# The Python package as `pip install .` lays it out, cheaply: a virtual
# environment, `pip install .` (libattnc_c and the extension
# attnc._fastcall) with scikit-build-core reusing the build folder that tools/setup.sh configured and built (same generator and build
# type, so nothing is recompiled; a fresh build of attnc_c would cost a
# second full compile), then the package's CPU tests run against the
# installed package, from outside the source tree's python/ and without
# ATTNC_LIBRARY, with no PyTorch in the environment (the torch tests use a
# stand-in or skip). .ci/run runs it after the test suite. Needs venv and
# access to PyPI for scikit-build-core. BUILD_DIR as for setup.sh.
#
# Two things made a reuse drop the folder's CMake cache and recompile
# everything: the compilers scikit-build-core sets from sysconfig (the
# cached ones are passed), and scikit-build-core's own path changing with
# each isolated build environment (it is installed in the environment and
# the build not isolated). The script prints the build steps the wheel
# ran, so a recompile would show in the log. The folder's own Python is
# passed too, so its tests keep running with it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
venv="$build/python-venv"

if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "python_package_check.sh: no configured build in $build (run tools/setup.sh)" >&2
  exit 1
fi
# scikit-build-core sets CC/CXX from the interpreter's sysconfig when they
# are unset; a compiler other than the cached one would make CMake drop the
# cache and recompile everything. Give it the build folder's own.
cached() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
export CC="$(cached CMAKE_C_COMPILER)" CXX="$(cached CMAKE_CXX_COMPILER)"
# The folder's Python stays the one its tests run with (the environment's
# has no matplotlib for test_bench_plot, no PyTorch).
python_exe="$(cached Python3_EXECUTABLE)"
[ -n "$python_exe" ] && [ "${python_exe#$build/python-venv}" = "$python_exe" ] \
  || python_exe="$(command -v python3)"

start=$(date +%s)
python3 -m venv "$venv"
# scikit-build-core in the environment itself, and no isolated build
# environment: scikit-build-core clears the build folder's CMake cache when
# it runs from another path than last time (a new temporary environment
# each isolated build), which recompiled everything on a second run.
"$venv/bin/pip" install -q "scikit-build-core>=0.10"
"$venv/bin/pip" install -v --no-build-isolation "$root" -Cbuild-dir="$build" \
  -Ccmake.define.Python3_EXECUTABLE="$python_exe" \
  > "$build/pip-install.log" 2>&1 || { tail -50 "$build/pip-install.log"; exit 1; }
steps=$(grep -c '^ *\[[0-9]*/[0-9]*\] ' "$build/pip-install.log" || true)
echo "python_package_check.sh: pip install . took $(( $(date +%s) - start )) s," \
  "$steps build steps (ninja: $(grep -o 'no work to do' "$build/pip-install.log" | head -1))"

unset PYTHONPATH ATTNC_LIBRARY ATTNC_FASTCALL
# Where the build folder made the extension, the installed package must
# hold it and load it (and its tests must not skip).
if [ -f "$build/capi/_fastcall.abi3.so" ]; then
  export ATTNC_EXPECT_FASTCALL=1
fi
cd "$root/tests/python"
"$venv/bin/python" - <<'PY'
import os
import pathlib
import attnc
package = pathlib.Path(attnc.__file__).parent
assert "site-packages" in package.parts, package
assert pathlib.Path(attnc._lib.library_path).parent == package, (
    attnc._lib.library_path)
print("attnc installed in", package)
if os.environ.get("ATTNC_EXPECT_FASTCALL") == "1":
    assert attnc._lib.forward_call is not None, attnc._lib.fastcall_missing
    assert attnc._lib.fastcall_path.parent == package, attnc._lib.fastcall_path
    print("attnc._fastcall installed:", attnc._lib.fastcall_path.name)
PY
"$venv/bin/python" -m unittest test_definitions test_attention test_linear \
  test_linear_args test_torch_import test_torch_args test_torch_fast \
  test_paged test_block_mask test_dsl_errors test_dsl_symbols \
  test_dsl_library test_dsl_twins
