"""Search speed with stop dimensions and 4-bit IDF levels at 100k documents, one thread, against bm25s.

Opens benchmarks/search_speed.py's synthetic 100k index read-only (documents with the quickstart model's density,
the real SciFact test queries encoded by that model), applies `QueryWeighting` per threshold and times single
queries (medians, k = 10). bm25s runs in the same process on 100k dictionary definitions (search_speed.py's).
If benchmarks/lookup_queries.py has built the lookup table, the inference-free end to end (lookup encode + search)
is timed too.

    .venv/bin/python benchmarks/stop_dims_speed.py

Prints a table and writes benchmarks/results/stop_dims_speed.json. Settings: benchmarks/configs/stop_dims_speed.toml.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.search.stopdims import QueryWeighting

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed_common import single_query_ms  # noqa: E402
from speed_peers import bench_bm25s  # noqa: E402
from speed_stats import load_stats  # noqa: E402
from settings import ROOT, comma_list, parse_args, record  # noqa: E402

OUT_JSON = ROOT / "benchmarks" / "results" / "stop_dims_speed.json"
K = 10


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def timed(name: str, search, rows, **extra) -> dict:
    times = single_query_ms(search, rows)
    row = {"system": name, "p50_ms": round(float(np.median(times)), 3),
           "p95_ms": round(float(np.quantile(times, 0.95)), 3), "n_queries": len(rows), **extra}
    log(json.dumps(row))
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-queries", type=int)
    parser.add_argument("--max-df", type=comma_list(float))
    args, config, settings = parse_args(parser, "stop_dims_speed", argv)
    directory = ROOT / args.index_dir
    _, queries, _ = load_stats()
    queries = queries[: args.n_queries]
    binary = InvertedIndex.load(directory / "uhd-binary", mmap=True, verify=False)
    binary.warm_up()
    rows = []
    for max_df in args.max_df:
        weighting = QueryWeighting.of_index(binary, None if max_df >= 1.0 else max_df, idf=True)
        kept = weighting.drop(queries)
        levels = weighting.quantize(kept)
        dims = float(kept.active_per_row().mean())
        singles = [kept[i:i + 1] for i in range(kept.n)]
        rows.append(timed(f"binary max_df={max_df:g}", lambda q: binary.search_encoded(q, K, [1.0], "binary",
                                                                                       n_threads=1),
                          singles, max_df=max_df, query_dims=round(dims, 1)))
        level_rows = [levels[i:i + 1] for i in range(levels.n)]
        rows.append(timed(f"idf4 max_df={max_df:g}", lambda q: binary.search_encoded(q, K, [1.0], "quantized",
                                                                                     n_threads=1),
                          level_rows, max_df=max_df, query_dims=round(dims, 1)))
    weighted = InvertedIndex.load(directory / "uhd-weighted", mmap=True, verify=False)
    weighted.warm_up()
    few = [queries[i:i + 1] for i in range(min(args.n_weighted, queries.n))]
    rows.append(timed("weighted (float) max_df=1", lambda q: weighted.search_encoded(q, K, [1.0], "weighted",
                                                                                      n_threads=1), few, max_df=1.0))
    lookup_dir = ROOT / "out" / "lookup"
    if args.model and lookup_dir.is_dir():
        from uhdsearch.encoder.lookup import LookupEncoder
        from uhdsearch.encoder.model import UHDEncoder
        from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir

        model = UHDEncoder.from_pretrained(ROOT / args.model)
        if (lookup_dir / model.digest()).is_dir():
            lookup = LookupEncoder.load(lookup_dir / model.digest(), model)
            texts = [q.text for q in load_beir(bundled_dataset_dir("scifact"), "test").queries][: args.n_queries]
            for max_df in (1.0, args.max_df[1] if len(args.max_df) > 1 else 1.0):
                weighting = QueryWeighting.of_index(binary, None if max_df >= 1.0 else max_df, idf=True)

                def end_to_end(text, weighting=weighting):
                    q = weighting.quantize(weighting.drop(lookup.encode([text])))
                    return binary.search_encoded(q, K, [1.0], "quantized", n_threads=1)
                rows.append(timed(f"lookup encode + idf4 search max_df={max_df:g}", end_to_end, texts, max_df=max_df))
    bm25 = bench_bm25s(binary.n_documents, queries.n, args.seed)[0]
    rows.append({"system": "bm25s", "p50_ms": round(bm25["p50_ms"], 3), "p95_ms": round(bm25.get("p95_ms", 0), 3),
                 "n_queries": queries.n})
    base = rows[0]["p50_ms"]
    for r in rows:
        r["x_bm25s"] = round(r["p50_ms"] / bm25["p50_ms"], 3)
        r["x_binary"] = round(r["p50_ms"] / base, 3)
    print(f"{'system':<42} {'dims':>6} {'p50 ms':>8} {'x bm25s':>8} {'x binary':>8}")
    for r in rows:
        print(f"{r['system']:<42} {r.get('query_dims', ''):>6} {r['p50_ms']:>8.3f} {r['x_bm25s']:>8.3f} "
              f"{r['x_binary']:>8.3f}")
    settings = {key: str(v) if isinstance(v, Path) else v for key, v in settings.items()}
    load = os.getloadavg()
    result = {"script": "benchmarks/stop_dims_speed.py", **record(config, settings), "n_documents": binary.n_documents,
              "threads": 1, "k": K, "load_average_at_end": [round(x, 2) for x in load], "rows": rows}
    OUT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {OUT_JSON}")


if __name__ == "__main__":
    main()
