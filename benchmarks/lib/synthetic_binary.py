"""A binary-only synthetic index at any size with the real density (search_speed.py's generator, no weights).

search_speed.py writes a binary and a weighted index plus an oracle per size; at 1M the weighted index alone is
19 GB. The growth and stop-dims speed benchmarks need only the binary index, cached here by size, seed and the
density statistics' digest (the same key as search_speed.py's).

    .venv/bin/python -m benchmarks.lib.synthetic_binary 100000 1000000
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.lib.density import load_stats
from benchmarks.lib.settings import ROOT
from benchmarks.lib.synthetic import SyntheticPostings

WORK_DIR = ROOT / "out" / "synthetic_binary"


def binary_index_dir(n_docs: int, seed: int = 0, work_dir: Path = WORK_DIR) -> Path:
    """Generate (once) and return the directory of the binary index of `n_docs` synthetic documents."""
    from uhdsearch.index.writer import IndexWriter

    profile, _, digest = load_stats()
    directory = work_dir / f"n{n_docs}-seed{seed}-{digest}"
    if (directory / "done.json").is_file():
        return directory / "uhd-binary"
    directory.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    synth = SyntheticPostings(profile, n_docs, seed=seed)
    writer = IndexWriter(directory / "uhd-binary", "binary", dim=synth.dim, n_buckets=1, n_documents=n_docs,
                         overwrite=True)
    for block in synth.blocks(max_postings=1 << 25):
        writer.add_postings(0, block.first_dim, block.indptr, block.docs)
    writer.close()
    info = {"n_documents": n_docs, "n_postings": int(synth.n_postings), "seed": seed,
            "seconds": round(time.perf_counter() - t0, 1)}
    (directory / "done.json").write_text(json.dumps(info) + "\n", encoding="utf-8")
    print(f"generated {n_docs:,} documents in {info['seconds']} s -> {directory}", file=sys.stderr, flush=True)
    return directory / "uhd-binary"


if __name__ == "__main__":
    for n in sys.argv[1:]:
        print(binary_index_dir(int(n)))
