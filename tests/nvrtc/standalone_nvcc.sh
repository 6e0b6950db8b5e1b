#!/usr/bin/env bash
# `attnc emit --standalone` of mha at head dims D/DV, built by a plain nvcc
# for sm_80 (the file needs no include path). Exit 77 (ctest's skip) where
# no nvcc was found when the build was configured.
#   standalone_nvcc.sh ATTNC NVCC D DV
set -euo pipefail
attnc=$1 nvcc=$2 d=$3 dv=$4
if [[ -z "$nvcc" || ! -x "$nvcc" ]]; then
  echo "no nvcc: skipped"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$attnc" emit mha --head-dim "$d" --head-dim-v "$dv" --standalone -o "$dir/k.cu"
"$nvcc" -arch=sm_80 -c "$dir/k.cu" -o "$dir/k.o"
test -s "$dir/k.o"
echo "nvcc built mha d$d/$dv for sm_80"
