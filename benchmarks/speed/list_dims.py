"""Query dims by layout: ms per query when a query holds list-encoded dims, bitmap dims, or both.

A dim active in under ~1.3 % of the documents is stored as a packed list, the others as bitmaps (index/codec.py).
Real queries hold about 2 list dims among ~490 kept dims (SciFact test on the synthetic 1M index); a cascade's
first pass over its rarest dims holds a larger share of them. Each shape draws `n_queries` random queries of that
many dims of each kind from the synthetic index, times exact top-100 search interleaved (one thread, p50), plain
counts and length-normalized. Run it at two commits to compare kernels (the README's "List dims count into the
planes" does so).

    .venv/bin/python -m benchmarks.speed.list_dims     # quiet cores: the timings are the point

Writes benchmarks/results/list_dims.json; prints a table. Settings: configs/list_dims.toml.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from benchmarks.lib.synthetic_binary import binary_index_dir
from benchmarks.lib.timer import median_ms, time_interleaved
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.sparse import SparseEncoding

RESULT_JSON = RESULTS / "list_dims.json"
K = 100


def parse_shape(text: str) -> tuple[int, int]:
    """"12 bitmaps + 2 lists" -> (bitmap dims, list dims) = (12, 2)."""
    counts = {"bitmaps": 0, "lists": 0}
    for part in text.split("+"):
        n, kind = part.split()
        counts["lists" if kind.startswith("list") else "bitmaps"] += int(n)
    return counts["bitmaps"], counts["lists"]


def queries_of(shape: str, bitmap_dims, list_dims, dim: int, n: int, rng) -> list[SparseEncoding]:
    n_bitmaps, n_lists = parse_shape(shape)
    out = []
    for _ in range(n):
        dims = np.sort(np.concatenate([rng.choice(bitmap_dims, n_bitmaps, replace=False),
                                       rng.choice(list_dims, n_lists, replace=False)]))
        m = sp.csr_matrix((np.ones(dims.shape[0], np.float32), dims, [0, dims.shape[0]]), shape=(1, dim))
        out.append(SparseEncoding([m]))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-documents", type=int)
    parser.add_argument("--n-queries", type=int)
    parser.add_argument("--shapes", type=comma_list())
    parser.add_argument("--alpha", type=comma_list(float))
    parser.add_argument("--label", default="", help="the results file's key for this run (default: the commit)")
    args, config, settings = parse_args(parser, "list_dims", argv)
    index = InvertedIndex.load(binary_index_dir(args.n_documents, args.seed), mmap=True, verify=False)
    index.warm_up()
    rows = np.asarray(index.buckets[0].bitmap_rows)
    df = index.document_frequencies(0)
    bitmap_dims, list_dims = np.flatnonzero(rows >= 0), np.flatnonzero((rows < 0) & (df > 0))
    rng = np.random.default_rng(args.seed)
    load_start = os.getloadavg()
    systems = {}
    for shape in args.shapes:
        queries = queries_of(shape, bitmap_dims, list_dims, index.dim, args.n_queries, rng)
        for alpha in args.alpha:
            index.length_scales(alpha) if alpha else None
            systems[f"{shape} | ln{alpha:g}"] = (
                lambda q, a=alpha: index.search_encoded(q, K, [1.0], "binary", n_threads=1, length_norm=a), queries)
    times = time_interleaved(systems, args.n_queries)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip())
    table = [{"shape": name.split(" | ")[0], "alpha": float(name.split(" | ln")[1]),
              "p50_ms": round(median_ms(t), 3)} for name, t in times.items()]
    print(f"{'query shape':<26} {'alpha':>6} {'p50 ms':>8}")
    for r in table:
        print(f"{r['shape']:<26} {r['alpha']:>6g} {r['p50_ms']:>8.3f}")
    print(f"index: {bitmap_dims.shape[0]} bitmap dims, {list_dims.shape[0]} list dims (largest list df "
          f"{df[list_dims].max() / args.n_documents:.4f}); code at {commit}{' + changes' if dirty else ''}")
    previous = json.loads(RESULT_JSON.read_text()) if RESULT_JSON.exists() else {}
    key = args.label or f"{commit}{'+' if dirty else ''}"
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in settings.items()}
    previous[key] = {"script": "benchmarks/speed/list_dims.py", **record(config, settings), "commit": commit,
                     "uncommitted_source_changes": dirty, "threads": 1, "k": K,
                     "n_bitmap_dims": int(bitmap_dims.shape[0]), "n_list_dims": int(list_dims.shape[0]),
                     "load_average_at_start": [round(x, 2) for x in load_start],
                     "load_average_at_end": [round(x, 2) for x in os.getloadavg()], "rows": table}
    RESULT_JSON.write_text(json.dumps(previous, indent=1) + "\n")
    print(f"wrote {RESULT_JSON} (key {key})", file=sys.stderr)


if __name__ == "__main__":
    main()
