"""Bench results as JSON lines, the Python twin of tools/bench/BenchJson.h:
every timed row a peer script prints is also appended to $ATTNC_BENCH_JSON
when it is set, with the same keys, for tools/bench/plot.py."""
import datetime
import json
import os


def record(bench, impl, variant, dtype, mask, B, H, S, D, DV, ms, tflops,
           config=""):
    path = os.environ.get("ATTNC_BENCH_JSON")
    if not path:
        return
    import torch  # the peers' dependency, not this module's

    row = {"bench": bench, "impl": impl, "variant": variant, "dtype": dtype,
           "mask": mask, "config": config, "B": B, "H": H, "S": S, "D": D,
           "DV": DV, "ms": round(ms, 4), "tflops": round(tflops, 2),
           "card": torch.cuda.get_device_name(),
           "date": datetime.datetime.now(datetime.timezone.utc)
           .strftime("%Y-%m-%d")}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def load(paths):
    """Every row of the JSON-lines files \\p paths, in order."""
    rows = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    return rows
