"""Load time of a static index with and without the load-time structural checks (index/checks.py), same run.

The checks (offsets, row numbers, block starts, bitmap padding bits; O(dim + blocks + bitmap rows)) run on every
`InvertedIndex.load`; "without" replaces them by a no-op for the timing only. The index is the synthetic binary
index of synthetic_binary.py at the real density (cached under out/). Loads alternate and each is timed `repeats`
times from the page cache; medians are reported, for memory-mapped loads (the default above 256 MB) and for loads
into memory (indexes up to 1 GB). Checksums (`verify`) are off in both: above 128 MB they are off by default.
The bitmaps' padding check runs only for loads into memory and document counts that are not a multiple of 64
(1,000,000 is); its read from a fresh memory map (each bitmap's last word: a page fault per row) is timed on its
own, `padding_check`, which is why memory-mapped loads leave those bits to the kernels' masks.

    .venv/bin/python -m benchmarks.speed.index_load                  # 1M documents -> benchmarks/results/index_load.json
    .venv/bin/python -m benchmarks.speed.index_load --n-docs 100000 --no-write
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.lib.settings import RESULTS, record
from benchmarks.lib.synthetic_binary import binary_index_dir

RESULT = RESULTS / "index_load.json"


def time_loads(path: Path, mmap: bool, repeats: int) -> dict:
    from uhdsearch.index import inverted

    checked = inverted.check_bucket
    times: dict[str, list[float]] = {"with_checks": [], "without_checks": []}
    cpu: dict[str, list[float]] = {"with_checks": [], "without_checks": []}
    inverted.InvertedIndex.load(path, mmap=mmap, verify=False)  # page cache and numba's compiled check, once
    try:
        for _ in range(repeats):
            for key in times:
                inverted.check_bucket = checked if key == "with_checks" else (lambda *args, **kwargs: None)
                t0, c0 = time.perf_counter(), time.process_time()
                index = inverted.InvertedIndex.load(path, mmap=mmap, verify=False)
                times[key].append(time.perf_counter() - t0)
                cpu[key].append(time.process_time() - c0)
                del index
    finally:
        inverted.check_bucket = checked
    wall = {key: round(statistics.median(values) * 1e3, 1) for key, values in times.items()}
    used = {key: round(statistics.median(values) * 1e3, 1) for key, values in cpu.items()}
    # CPU time (user + system, page faults included) as well as wall time: on a busy machine the wall time of a
    # 60 ms load varies by more than the checks cost
    return {"mmap": mmap, "median_ms": wall, "median_cpu_ms": used,
            "checks_ms": round(wall["with_checks"] - wall["without_checks"], 1),
            "checks_cpu_ms": round(used["with_checks"] - used["without_checks"], 1)}


def time_padding_read(path: Path, n_documents: int, repeats: int) -> dict:
    """Median ms of the padding check's read (each bitmap's last word, from a fresh memory map: a page fault per
    row) as checks.py does it; timed on its own because it runs only when n_documents is not a multiple of 64."""
    import numpy as np

    words = (n_documents + 63) // 64
    times, cpu = [], []
    for _ in range(repeats):
        bitmaps = np.load(path / "bucket_0.bitmaps.npy", mmap_mode="r")
        t0, c0 = time.perf_counter(), time.process_time()
        np.any(bitmaps[words - 1::words] >> np.uint64(1))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        del bitmaps
    return {"median_ms": round(statistics.median(times) * 1e3, 1),
            "median_cpu_ms": round(statistics.median(cpu) * 1e3, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-docs", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    path = binary_index_dir(args.n_docs)
    from uhdsearch.index.inverted import InvertedIndex

    index = InvertedIndex.load(path, mmap=True, verify=False)
    # memory-mapped (load's default above 256 MB) always; into memory too while it takes at most 1 GB
    modes = (True, False) if index.nbytes() <= 1 << 30 else (True,)
    result = {**record(None, {key: value for key, value in vars(args).items() if key != "no_write"}),
              "n_documents": index.n_documents, "dim": index.dim, "index_bytes": index.nbytes(),
              "n_bitmap_dims": index.buckets[0].n_bitmaps(), "n_blocks": int(index.buckets[0].block_ptr[-1]),
              "loads": [time_loads(path, mmap, args.repeats) for mmap in modes],
              "padding_check": time_padding_read(path, index.n_documents, args.repeats),
              "padding_checked_in_loads": index.n_documents % 64 != 0,
              "load_average_1min": round(os.getloadavg()[0], 2)}  # the machine's business during the run
    print(json.dumps(result, indent=1))
    if not args.no_write:
        RESULT.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
