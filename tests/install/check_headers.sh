#!/usr/bin/env bash
# Installs the attnc build in $3 into a fresh prefix and compiles each
# installed header alone (a file that includes only it) with the prefix's
# include directory and CUDA's ($2, for cuda.h) as the only include paths,
# using the compiler $1. Fails if a header does not compile alone (it needs
# a header that is not installed) or if it reaches, transitively, an LLVM or
# DLPack header (docs/architecture.md, "Public headers"). First it checks
# itself: a header that includes LLVM ($4 is LLVM's include directory) must
# be reported.
set -euo pipefail
cxx=$1 cuda_include=$2 build=$3 llvm_include=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "header check: $*" >&2; exit 1; }

# check_header INCLUDE_DIR HEADER [EXTRA_FLAGS...]: prints why HEADER (a path
# under INCLUDE_DIR) fails, nothing when it passes.
check_header() {
  local dir=$1 header=$2
  shift 2
  printf '#include "%s"\n' "$header" >"$work/tu.cpp"
  local out
  if ! out=$("$cxx" -std=c++17 -fsyntax-only -H -I"$dir" -isystem "$cuda_include" \
               "$@" "$work/tu.cpp" 2>&1); then
    echo "$header does not compile alone:"
    echo "$out" | grep -v '^\.' | head -20
    return
  fi
  # -H lists every header opened, one per line, behind dots.
  local bad
  bad=$(grep -E '^\.+ .*(/llvm/|/llvm-c/|dlpack)' <<<"$out" || true)
  if [[ -n $bad ]]; then
    echo "$header reaches a private dependency's header:"
    echo "$bad" | head -5
  fi
}

# The checker must see a header that includes LLVM.
mkdir -p "$work/self/attn"
printf '#include "llvm/ADT/StringRef.h"\n' >"$work/self/attn/Bad.h"
why=$(check_header "$work/self" attn/Bad.h -isystem "$llvm_include")
grep -q 'reaches a private dependency' <<<"$why" ||
  fail "the check missed an LLVM include: '$why'"

cmake --install "$build" --prefix "$work/prefix" --component devel >/dev/null
include=$work/prefix/include
cd "$include"
headers=$(find . -name '*.h' | sed 's|^\./||' | sort)
[[ -n $headers ]] || fail "no header installed under $include"
failures=""
count=0
for h in $headers; do
  count=$((count + 1))
  why=$(check_header "$include" "$h")
  [[ -z $why ]] || failures+="$why"$'\n'
done
[[ -z $failures ]] || fail $'\n'"$failures"
echo "header check: $count installed headers compile alone without LLVM or DLPack"
