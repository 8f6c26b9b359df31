"""Inference-free queries (encoder/lookup.py) against the full query encoder: test nDCG@10 and encode time.

The table is built once from the model (cached under out/lookup/<digest>/). Documents are the model's own
(benchmarks/encoded_cache.py); both query sides are scored by the same kernels, binary and with the chosen
stop-dimension default and 4-bit IDF.

    .venv/bin/python benchmarks/lookup_queries.py

Prints a table and writes benchmarks/results/lookup_queries.json. Settings: benchmarks/configs/lookup_queries.toml.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from uhdsearch.encoder.lookup import LookupEncoder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from settings import ROOT, comma_list, parse_args, record  # noqa: E402
from stop_dims import Collection  # noqa: E402

OUT_JSON = ROOT / "benchmarks" / "results" / "lookup_queries.json"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def lookup_for(model) -> tuple[LookupEncoder, float]:
    directory = ROOT / "out" / "lookup" / model.digest()
    try:
        return LookupEncoder.load(directory, model), 0.0
    except FileNotFoundError:
        t0 = time.perf_counter()
        lookup = LookupEncoder.from_model(model)
        seconds = time.perf_counter() - t0
        directory.mkdir(parents=True, exist_ok=True)
        lookup.save(directory)
        return lookup, seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collections", type=comma_list())
    parser.add_argument("--n-timed", type=int)
    args, config, settings = parse_args(parser, "lookup_queries", argv)
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import load_beir

    model = UHDEncoder.from_pretrained(ROOT / args.model)
    lookup, build_s = lookup_for(model)
    log(f"lookup table: {sum(t.nnz for t in lookup.tables):,} entries (built in {build_s:.0f} s)")
    rows = []
    for name in args.collections:
        index_dir = ROOT / args.scifact_index if name == "scifact" else None
        collection = Collection(model, ROOT / args.data_root / name, index_dir)
        ids, full, qrels = collection.split("test")
        data = load_beir(collection.data_dir, "test")
        texts = {q.query_id: q.text for q in data.queries}
        fast = lookup.encode([texts[q] for q in ids])
        for side, queries in (("full encoder", full), ("lookup", fast)):
            for max_df in (1.0, args.max_df):
                row = collection.score(ids, queries, qrels, max_df, 100)
                rows.append({"collection": name, "queries": side, "query_dims": row["query_dims"], "max_df": max_df,
                             "binary": row["binary"], "binary-idf4": row["binary-idf4"]})
                log(json.dumps(rows[-1]))
    sample = [texts[q] for q in ids][: args.n_timed]
    times = []
    for text in sample * 2:  # the first pass warms caches
        t0 = time.perf_counter()
        lookup.encode([text])
        times.append((time.perf_counter() - t0) * 1e3)
    encode_ms = float(np.median(times[len(sample):]))
    settings = {key: str(v) if isinstance(v, Path) else v for key, v in settings.items()}
    result = {"script": "benchmarks/lookup_queries.py", **record(config, settings), "model_digest": model.digest(),
              "table_entries": int(sum(t.nnz for t in lookup.tables)), "table_build_s": round(build_s, 1),
              "lookup_encode_p50_ms": round(encode_ms, 3), "rows": rows}
    print(f"{'collection':<9} {'queries':<13} {'dims':>5} {'max_df':>6} {'binary':>7} {'idf4':>7}")
    for r in rows:
        print(f"{r['collection']:<9} {r['queries']:<13} {r['query_dims']:>5.0f} {r['max_df']:>6g} {r['binary']:>7.4f} "
              f"{r['binary-idf4']:>7.4f}")
    print(f"lookup encode p50: {encode_ms:.3f} ms per query (one at a time)")
    OUT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {OUT_JSON}")


if __name__ == "__main__":
    main()
