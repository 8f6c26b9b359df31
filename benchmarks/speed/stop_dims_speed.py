"""Search speed with stop dimensions and 4-bit IDF levels at 100k and 1M documents, one thread, against bm25s.

Opens benchmarks/lib/synthetic_binary.py's synthetic binary indexes (documents with the quickstart model's density,
the real SciFact test queries encoded by that model; generated on first use), applies `QueryWeighting` per
threshold and times single queries (medians, k = 10): binary and 4-bit IDF (the kernels' quantized scoring) over
the same kept dims, timed interleaved query by query so that the load of other jobs falls alike on both. bm25s runs
in the same process on dictionary definitions of the same size (search_speed.py's). If
benchmarks/experiments/lookup_queries.py has built the lookup table, the inference-free end to end (lookup encode + search)
is timed too at the smallest size.

    .venv/bin/python -m benchmarks.speed.stop_dims_speed

Prints a table and writes benchmarks/results/stop_dims_speed.json. Settings: benchmarks/configs/stop_dims_speed.toml.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from benchmarks.lib.density import load_stats
from benchmarks.lib.peers import bench_bm25s
from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from benchmarks.lib.synthetic_binary import binary_index_dir
from benchmarks.lib.timer import median_ms, percentiles, time_calls, time_interleaved
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.search.stopdims import QueryWeighting

OUT_JSON = RESULTS / "stop_dims_speed.json"
K = 10


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def summary(name: str, times: np.ndarray, **extra) -> dict:
    row = {"system": name, **percentiles(times), "n_queries": int(times.shape[0]), **extra}
    log(json.dumps(row))
    return row


def bench_size(n_docs: int, queries, args) -> list[dict]:
    n_queries = min(queries.n, args.n_queries if n_docs <= 100_000 else args.n_queries_large)
    queries = queries[:n_queries]
    binary = InvertedIndex.load(binary_index_dir(n_docs, args.seed), mmap=True, verify=False)
    binary.warm_up()
    rows = []
    for max_df in args.max_df:
        weighting = QueryWeighting.of_index(binary, None if max_df >= 1.0 else max_df, idf=True)
        kept = weighting.drop(queries)
        levels = weighting.quantize(kept)
        dims = round(float(kept.active_per_row().mean()), 1)
        times = time_interleaved({
            "binary": (lambda q: binary.search_encoded(q, K, [1.0], "binary", n_threads=1),
                       [kept[i:i + 1] for i in range(kept.n)]),
            "idf4": (lambda q: binary.search_encoded(q, K, [1.0], "quantized", n_threads=1),
                     [levels[i:i + 1] for i in range(levels.n)])}, kept.n)
        pair = [summary(f"{name} max_df={max_df:g}", t, n_docs=n_docs, max_df=max_df, query_dims=dims)
                for name, t in times.items()]
        pair[1]["idf4_over_binary"] = round(median_ms(times["idf4"]) / median_ms(times["binary"]), 3)
        rows += pair
    lookup_dir = ROOT / "out" / "lookup"
    if args.model and lookup_dir.is_dir() and n_docs == min(args.sizes):
        rows += lookup_rows(binary, args, lookup_dir, n_docs)
    del binary
    bm25 = bench_bm25s(n_docs, n_queries, args.seed)[0]
    rows.append({"system": "bm25s", "n_docs": n_docs, "p50_ms": round(bm25["p50_ms"], 3),
                 "p95_ms": round(bm25.get("p95_ms", 0), 3), "n_queries": n_queries})
    base = rows[0]["p50_ms"]
    for r in rows:
        r["x_bm25s"] = round(r["p50_ms"] / bm25["p50_ms"], 3)
        r["x_binary"] = round(r["p50_ms"] / base, 3)
    return rows


def lookup_rows(binary, args, lookup_dir: Path, n_docs: int) -> list[dict]:
    from uhdsearch.encoder.query.table import LookupEncoder
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir

    model = UHDEncoder.from_pretrained(ROOT / args.model)
    if not (lookup_dir / model.digest()).is_dir():
        return []
    lookup = LookupEncoder.load(lookup_dir / model.digest(), model)
    texts = [q.text for q in load_beir(bundled_dataset_dir("scifact"), "test").queries][: args.n_queries]
    rows = []
    for max_df in (1.0, args.max_df[1] if len(args.max_df) > 1 else 1.0):
        weighting = QueryWeighting.of_index(binary, None if max_df >= 1.0 else max_df, idf=True)

        def end_to_end(text, weighting=weighting):
            q = weighting.quantize(weighting.drop(lookup.encode([text])))
            return binary.search_encoded(q, K, [1.0], "quantized", n_threads=1)
        rows.append(summary(f"lookup encode + idf4 search max_df={max_df:g}", time_calls(end_to_end, texts, n_warmup=10),
                            n_docs=n_docs, max_df=max_df))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=comma_list(int))
    parser.add_argument("--n-queries", type=int)
    parser.add_argument("--n-queries-large", type=int)
    parser.add_argument("--max-df", type=comma_list(float))
    parser.add_argument("--model", help="model directory of the lookup table; '' skips the lookup rows")
    parser.add_argument("--seed", type=int)
    args, config, settings = parse_args(parser, "stop_dims_speed", argv)
    _, queries, _ = load_stats()
    load_start = os.getloadavg()
    rows = [r for n_docs in args.sizes for r in bench_size(n_docs, queries, args)]
    print(f"{'system':<42} {'n_docs':>9} {'dims':>6} {'p50 ms':>8} {'x bm25s':>8} {'x binary':>8} {'idf4/bin':>8}")
    for r in rows:
        print(f"{r['system']:<42} {r['n_docs']:>9,} {r.get('query_dims', ''):>6} {r['p50_ms']:>8.3f} "
              f"{r['x_bm25s']:>8.3f} {r['x_binary']:>8.3f} {r.get('idf4_over_binary', ''):>8}")
    settings = {key: str(v) if isinstance(v, Path) else v for key, v in settings.items()}
    result = {"script": "benchmarks/speed/stop_dims_speed.py", **record(config, settings), "threads": 1, "k": K,
              "load_average_at_start": [round(x, 2) for x in load_start],
              "load_average_at_end": [round(x, 2) for x in os.getloadavg()], "rows": rows}
    OUT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {OUT_JSON}")


if __name__ == "__main__":
    main()
