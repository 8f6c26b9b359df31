"""Stop dimensions and IDF weighting: nDCG@10 and postings read per query over a grid of max_df thresholds.

Chose max_df 0.3, the stop-dimension default (`max_df="auto"`, search/stopdims.py DEFAULT_MAX_DF).

Every score comes from the index kernels (in-memory indexes of the cached encodings; benchmarks/lib/encoded_cache.py)
on the queries the Searcher would send: stop dims dropped, then binary, 4-bit IDF levels (quantized scoring),
float IDF over binary documents, weighted, weighted x IDF. The default threshold is chosen on SciFact's *train*
queries (`choose_on`): the smallest max_df (fewest postings) whose binary nDCG@10 is at least that of no
threshold; test splits are scored after that, once.

    .venv/bin/python -m benchmarks.experiments.stop_dims

Prints a table and writes benchmarks/results/stop_dims.json. Settings: benchmarks/configs/stop_dims.toml.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.lib.encoded_cache import encoded
from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.base import hits_per_query
from uhdsearch.index.inverted import WeightedIndex
from uhdsearch.search.stopdims import QueryWeighting
from uhdsearch.sparse import SparseEncoding
from uhdsearch.types import Run, ScoredDoc

OUT_JSON = RESULTS / "stop_dims.json"
SYSTEMS = ("binary", "binary-idf4", "binary-idf-float", "weighted", "weighted-idf")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Collection:
    """One collection's documents in two in-memory indexes (values, and all-ones for float IDF over binary)."""

    def __init__(self, model, data_dir: Path, index_dir: Path | None):
        self.data_dir = data_dir
        docs, self.doc_ids = encoded(model, data_dir, "document", index_dir)
        self.index = WeightedIndex.from_encoding(docs, self.doc_ids, None)
        self.ones = WeightedIndex.from_encoding(docs.binarize(), self.doc_ids, None)
        self.queries, query_ids = encoded(model, data_dir, "query")
        self.row_of = {q: i for i, q in enumerate(query_ids)}

    def split(self, split: str):
        data = load_beir(self.data_dir, split)
        ids = [q.query_id for q in data.queries if q.query_id in data.qrels]
        return ids, self.queries[np.array([self.row_of[q] for q in ids])], data.qrels

    def score(self, ids, queries: SparseEncoding, qrels, max_df: float, k: int) -> dict:
        weighting = QueryWeighting.of_index(self.index, None if max_df >= 1.0 else max_df, idf=True)
        kept = weighting.drop(queries)
        df = weighting.document_frequencies[0]
        postings = np.add.reduceat(df[kept.buckets[0].indices], kept.buckets[0].indptr[:-1]) \
            if kept.buckets[0].nnz else np.zeros(kept.n)
        float_idf = SparseEncoding([m.copy() for m in kept.buckets])
        float_idf.buckets[0].data = weighting.idf_weights(0)[float_idf.buckets[0].indices].astype(np.float32)
        plans = {"binary": (self.index, kept, "binary"),
                 "binary-idf4": (self.index, weighting.quantize(kept), "quantized"),
                 "binary-idf-float": (self.ones, float_idf, "weighted"), "weighted": (self.index, kept, "weighted"),
                 "weighted-idf": (self.index, weighting.scale(kept), "weighted")}
        row = {"max_df": max_df, "query_dims": round(float(kept.active_per_row().mean()), 1),
               "postings_per_query": round(float(np.mean(postings)), 1)}
        for name, (index, q, scoring) in plans.items():
            numbers, scores = index.search_encoded(q, k, [1.0], scoring)
            run = Run({qid: [ScoredDoc(d, s) for d, s in hits]
                       for qid, hits in zip(ids, hits_per_query(numbers, scores, index.doc_ids))}, name)
            row[name] = round(evaluate(run, qrels, ["nDCG@10"])["nDCG@10"], 4)
        return row


def grid(collection: Collection, split: str, thresholds, k: int) -> list[dict]:
    ids, queries, qrels = collection.split(split)
    rows = [collection.score(ids, queries, qrels, t, k) for t in thresholds]
    full = rows[0]["postings_per_query"]
    for r in rows:
        r["postings_saving"] = round(full / max(r["postings_per_query"], 1.0), 2)
    return rows


def choose(rows: list[dict]) -> float:
    """The smallest max_df whose binary nDCG@10 is at least that of no threshold (rows[0])."""
    ok = [r["max_df"] for r in rows if r["binary"] >= rows[0]["binary"]]
    return min(ok)


def table(title: str, rows: list[dict]) -> str:
    lines = [title, f"{'max_df':>7} {'dims':>6} {'postings':>9} {'saving':>6} " + " ".join(f"{s:>16}" for s in SYSTEMS)]
    for r in rows:
        lines.append(f"{r['max_df']:>7g} {r['query_dims']:>6.0f} {r['postings_per_query']:>9.0f} "
                     f"{r['postings_saving']:>5.1f}x " + " ".join(f"{r[s]:>16.4f}" for s in SYSTEMS))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--data-root", type=Path)
    parser.add_argument("--collections", type=comma_list())
    parser.add_argument("--max-df", type=comma_list(float))
    parser.add_argument("--test-once", action=argparse.BooleanOptionalAction)
    parser.add_argument("--k", type=int)
    args, config, settings = parse_args(parser, "stop_dims", argv)
    from uhdsearch.encoder.model import UHDEncoder

    start = time.time()
    model = UHDEncoder.from_pretrained(ROOT / args.model)
    thresholds = sorted(args.max_df, reverse=True)
    settings = {key: str(v) if isinstance(v, Path) else v for key, v in settings.items()}
    result = {"script": "benchmarks/experiments/stop_dims.py", **record(config, settings), "model_digest": model.digest(),
              "grids": {}}
    choose_collection, choose_split = args.choose_on.split(":")
    collections = {}
    for name in args.collections:
        index_dir = ROOT / args.scifact_index if name == "scifact" and args.scifact_index else None
        collections[name] = Collection(model, ROOT / args.data_root / name, index_dir)
    rows = grid(collections[choose_collection], choose_split, thresholds, args.k)
    result["grids"][f"{choose_collection}:{choose_split}"] = rows
    chosen = choose(rows)
    result["chosen_max_df"] = chosen
    print(table(f"{choose_collection} {choose_split} (choice: max_df = {chosen:g})", rows))
    if args.test_once:
        for name, collection in collections.items():
            rows = grid(collection, "test", thresholds, args.k)
            result["grids"][f"{name}:test"] = rows
            print(table(f"{name} test", rows))
    result["wall_s"] = round(time.time() - start, 1)
    OUT_JSON.parent.mkdir(parents=True, exist_ok=True)
    OUT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {OUT_JSON}")


if __name__ == "__main__":
    main()
