#!/bin/bash
# The fwd_sm90 benchmark table of docs/performance.md in one device command:
# attnc_bench rows, then tools/bench/peers.py on the same shapes in the same
# run, SASS counts of the compiled kernels, and last the two-stage and
# four-stage configurations at S = 4096.
#
#   bash tools/bench/sm90_table.sh BINDIR OUTDIR
#
# BINDIR holds attnc_bench; results go to OUTDIR (bench.log, peers.log,
# sass.log, probes.log). Every command has a timeout so that the run ends.
set -u
BIN=$1
OUT=$2
export ATTNC_CACHE_DIR=${ATTNC_CACHE_DIR:-/tmp/ac}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u; } |
  tee "$OUT/env.txt"
row() { timeout "${TO:-90}" "$BIN/attnc_bench" "$@" 2>&1 | tail -n1; }
# The first process of a fresh machine sets up the driver and NVRTC: keep it
# out of the table.
TO=120 row mha_full f16 1 1 1024 128 > /dev/null
{
  for dt in f16 bf16; do
    for S in 1024 2048 4096 8192 16384; do
      for n in mha_full mha; do row $n $dt $((16384 / S)) 32 $S 128; done
    done
  done
  for B in 1 8; do for S in 2048 4096 8192; do row sigmoid_attn f16 $B 32 $S 128; done; done
  for B in 32 64; do for S in 512 1024 2048; do row relu_attn f16 $B 6 $S 64; done; done
  for n in mha_full mha; do
    row $n f16 4 16 4096 192 128 # DeepSeek-V2-Lite heads
    row $n f16 4 12 4096 128 256 # Diff-Transformer heads
  done
} | tee "$OUT/bench.log"
SHAPES=$(mktemp)
for dt in f16 bf16; do
  for S in 1024 2048 4096 8192 16384; do echo "$dt $((16384 / S)) 32 $S 128"; done
done > "$SHAPES"
printf 'f16 4 16 4096 192 128\nf16 4 12 4096 128 256\n' >> "$SHAPES"
timeout 300 python3 -u "$(dirname "$0")/peers.py" --list "$SHAPES" 2>&1 |
  grep '^peer\|unavailable' | tee "$OUT/peers.log"
python3 - "$ATTNC_CACHE_DIR" <<'PY' 2>&1 | tee "$OUT/sass.log"
# The kernel cache's file: a header, the key, then the CUBIN (KernelCache.cpp).
import glob, struct, subprocess, sys
for f in sorted(glob.glob(sys.argv[1] + '/*fwd_sm90*.cubin')):
    b = open(f, 'rb').read()
    n = struct.unpack('<I', b[12:16])[0]
    off = 16 + n
    plen = struct.unpack('<Q', b[off:off + 8])[0]
    open('/tmp/k.cubin', 'wb').write(b[off + 40:off + 40 + plen])
    s = subprocess.run(['cuobjdump', '-sass', '-fun', 'attnc_fwd', '/tmp/k.cubin'],
                       capture_output=True, text=True).stdout
    print(f.split('/')[-1][:80], 'HGMMA', s.count('HGMMA'), 'LDL', s.count('LDL'),
          'STL', s.count('STL'))
PY
{
  for c in sm90.m128n128s2 sm90.m128n64s4; do
    for n in mha_full mha; do echo "$c $n: $(TO=30 row $n f16 4 32 4096 128 $c)"; done
  done
} | tee "$OUT/probes.log"
