#!/usr/bin/env python3
"""The SDPA peers (flash and cuDNN backends) of attnc_bench_sweep: every
shape of the forward table (H = 32, D = 128, B·S = 16k, S = 1k, 4k, 16k,
causal and not) for each dtype given, in one process, timed as peers.py
times them (CUDA events, warm-up calls for 1 s at least, median of 30,
three rotated input sets). FlexAttention is left out (peers.py has it; its
compile is slow).

    python3 tools/bench/peers_sweep.py f16 bf16
"""
import sys

import torch

from peers import time_shape  # the same timing and output as peers.py

print("torch", torch.__version__)
for dname in sys.argv[1:]:
    for S in (1024, 4096, 16384):
        time_shape([dname, str(16384 // S), "32", str(S), "128"], with_flex=False)
        torch.cuda.empty_cache()
