#!/usr/bin/env bash
# Installs the attnc build in $1 into a fresh prefix, builds the consumer
# project (tests/install) against it with find_package(attnc), and runs it:
# the generated CLI lists, shows, checks, emits and compiles the consumer's
# own definition, and a program makes an Attention for it on sm_80 and
# prints its kernel (attnc::runtime, NVRTC, no GPU needed). The consumer
# compiles with no LLVM include directory (public headers only).
# Then configures the consumer with attnc as a subproject (add_subdirectory)
# and checks that attnc leaves the parent's cache alone and adds no tests.
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "install test: $*" >&2; exit 1; }
# Output is captured before grep reads it: `cmd | grep -q` could end cmd
# with SIGPIPE, which pipefail would report as a failure.
expect() { # expect PATTERN OUTPUT WHAT
  grep -q -- "$1" <<<"$2" || fail "$3: expected '$1' in:"$'\n'"$2"
}

cmake --install "$build" --prefix "$work/prefix" --component devel >/dev/null
for f in lib/cmake/attnc/attncConfig.cmake lib/cmake/attnc/attncConfigVersion.cmake \
         include/attn/dsl/Library.h include/attnc-main/AttncMain.h lib/libattnc_compiler.a; do
  test -f "$work/prefix/$f" || fail "not installed: $f"
done
test -x "$work/prefix/bin/attnc" || fail "not installed: bin/attnc"

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" >/dev/null
cmake --build "$work/build" -j2 >/dev/null
# The public headers need no LLVM: the package gives the consumer no LLVM
# include directory (nor its definitions).
if grep -i 'llvm' "$work/build/compile_commands.json" >/dev/null; then
  fail "the consumer compiles with LLVM flags:"$'\n'"$(grep -i llvm "$work/build/compile_commands.json" | head -3)"
fi

cli=$work/build/my_attnc
export ATTNC_CACHE_DIR=$work/cache
expect '^softcap_window ' "$("$cli" list)" "my_attnc list"
expect 'tanh' "$("$cli" show softcap_window --after dce)" "my_attnc show"
expect 'all checks passed' "$("$cli" check softcap_window)" "my_attnc check"
"$cli" emit softcap_window -o "$work/k.cu" >/dev/null
expect 'softcap_window' "$(cat "$work/k.cu")" "my_attnc emit"
expect 'cubin:' "$("$cli" compile softcap_window --arch sm_80)" "my_attnc compile"
mine=$("$work/build/emit_mine")
expect '^kernel: softcap_window\.fwd_sm80\.f16\..*\.sm_80\.' "$mine" \
  "emit_mine's Attention on sm_80"
expect '^entry: ' "$mine" "emit_mine's kernel entry points"
expect '^mha ' "$("$work/prefix/bin/attnc" list)" "the installed attnc"

# attnc_add_definitions refuses a REGISTER that is not a global function's
# name, and SOURCES left out, at configure time, naming the argument.
bad_project() { # bad_project DIR CALL
  mkdir -p "$1"
  printf '%s\n' 'cmake_minimum_required(VERSION 3.20)' \
    'project(bad LANGUAGES C CXX)' 'find_package(attnc CONFIG REQUIRED)' \
    "$2" >"$1/CMakeLists.txt"
  if out=$(cmake -S "$1" -B "$1/build" -DCMAKE_PREFIX_PATH="$work/prefix" 2>&1); then
    fail "attnc_add_definitions accepted: $2"
  fi
  echo "$out"
}
expect 'REGISTER must name' \
  "$(bad_project "$work/bad1" 'attnc_add_definitions(x SOURCES a.cpp REGISTER my::reg)')" \
  "a namespaced REGISTER"
expect 'attnc_add_definitions(x): no SOURCES' \
  "$(bad_project "$work/bad2" 'attnc_add_definitions(x REGISTER reg)')" \
  "no SOURCES"

# As a subproject: configure only (building it all again would take long).
cmake -S "$here" -B "$work/sub" -G Ninja -DATTNC_SOURCE_DIR="$source_dir" \
  >/dev/null
cache=$(cat "$work/sub/CMakeCache.txt")
expect '^CMAKE_BUILD_TYPE:STRING=$' "$cache" "the parent's build type"
expect '^ATTNC_BUILD_TESTS:BOOL=OFF' "$cache" "tests of a subproject"
expect '^ATTNC_INSTALL:BOOL=OFF' "$cache" "install rules of a subproject"
if [[ -f "$work/sub/attnc/CTestTestfile.cmake" ]] &&
   grep -q add_test "$work/sub/attnc/CTestTestfile.cmake"; then
  fail "a subproject added tests"
fi
echo "install test: the consumer built and ran against $work/prefix; as a subproject attnc configured cleanly"
