#!/usr/bin/env bash
# Set-up for attnc on Debian 12 with the CUDA toolkit (>= 12) installed:
# installs missing packages, configures and builds, then runs the main job
# (`attnc list` and `attnc check --all`) or, with --test, the whole test suite.
#
#   bash tools/setup.sh          # install, build, run the main job
#   bash tools/setup.sh --test   # install, build, run every test
#
# BUILD_DIR (default: build) and JOBS (default: nproc) may be set.
set -euo pipefail

mode=main
case "${1:-}" in
  "") ;;
  --test) mode=test ;;
  -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
  *) echo "setup.sh: unknown argument '$1' (expected --test or nothing)" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"

# --- the CUDA toolkit (NVRTC) must already be there ---------------------------
cuda="${CUDA_HOME:-/usr/local/cuda}"
cuda_version=""
if [ -x "$cuda/bin/nvcc" ]; then
  cuda_version="$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9][0-9]*\)\..*/\1/p')"
fi
if [ -z "$cuda_version" ] || [ "$cuda_version" -lt 12 ]; then
  echo "setup.sh: attnc needs the CUDA toolkit 12 or newer (nvcc and NVRTC)." >&2
  echo "  looked in: $cuda (set CUDA_HOME to the toolkit's folder)" >&2
  echo "  install NVIDIA's cuda-toolkit package for Debian 12, then run this again." >&2
  exit 1
fi

# --- Debian packages ----------------------------------------------------------
packages=(cmake ninja-build g++ llvm-14-dev llvm-14-tools libfmt-dev
          nlohmann-json3-dev catch2 libdlpack-dev python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

# --- Python modules the Python tests use (numpy: the host models of the ring
# and linear context-parallel plans; matplotlib: the bench plots), for the
# python3 that CMake finds first on PATH -----------------------------------------
if ! python3 -c 'import numpy, matplotlib' 2>/dev/null; then
  echo "setup.sh: installing numpy and matplotlib for $(command -v python3)"
  python3 -m pip install -q numpy matplotlib
fi

# --- configure and build ------------------------------------------------------
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCUDAToolkit_ROOT="$cuda"
cmake --build "$build" -j "$jobs"

# --- run ----------------------------------------------------------------------
if [ "$mode" = test ]; then
  ctest --test-dir "$build" --output-on-failure -j "$jobs"
else
  "$build/tools/attnc/attnc" list
  "$build/tools/attnc/attnc" check --all
fi
