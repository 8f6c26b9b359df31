"""Document impacts as bit-planes (index/impacts.py): nDCG@10 against float weighted search, ms against binary.

Chose 2 document bits and 3 query bits for impact planes (index/impacts.py DOC_BITS, QUERY_BITS).

quality: the quickstart model's encodings of SciFact, CISI and Medline (benchmarks/lib/encoded_cache.py); float
weighted search (the weighted kernel), binary search, and the planes for every (document bits, query bits) pair,
every query dim kept (max_df none), and binary and planes again with the Searcher's default stop dimensions
(`max_df`). SciFact *train* chooses the pair (the highest nDCG@10, every dim kept); test splits are scored in the
same run and read only after the choice.

speed: synthetic indexes with the real density (benchmarks/lib/synthetic.py's postings, the same as
synthetic_binary.py's), each posting given an equal-frequency random level and split into planes; the SciFact test
queries of the stats file, one thread, k = 10, planes and binary search over the same postings timed interleaved
query by query.

    .venv/bin/python -m benchmarks.experiments.impact_planes quality
    .venv/bin/python -m benchmarks.experiments.impact_planes speed     # quiet cores; generates the plane indexes once

Writes benchmarks/results/impact_planes.json (both parts: each run keeps the other's rows). Settings:
benchmarks/configs/impact_planes.toml.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.lib.encoded_cache import encoded
from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.base import hits_per_query
from uhdsearch.index.impacts import PAIRS, ImpactPlanes, query_planes
from uhdsearch.index.inverted import InvertedIndex, WeightedIndex
from uhdsearch.search.stopdims import QueryWeighting
from uhdsearch.types import Run, ScoredDoc

OUT_JSON = RESULTS / "impact_planes.json"
WORK_DIR = ROOT / "out" / "impact_planes"
K = 10


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ndcg(numbers, scores, doc_ids, query_ids, qrels) -> float:
    run = Run(results={q: [ScoredDoc(d, s) for d, s in hits]
                       for q, hits in zip(query_ids, hits_per_query(numbers, scores, doc_ids))})
    return round(evaluate(run, qrels, ["nDCG@10"])["nDCG@10"], 4)


def quality(args) -> dict:
    from uhdsearch.encoder.model import UHDEncoder

    model = UHDEncoder.from_pretrained(ROOT / args.model)
    weights = model.config.weights
    grids = {}
    for name in args.collections:
        data_dir = ROOT / args.data_root / name
        docs, doc_ids = encoded(model, data_dir, "document")
        queries, query_ids = encoded(model, data_dir, "query")
        row_of = {q: i for i, q in enumerate(query_ids)}
        weighted = WeightedIndex.from_encoding(docs, doc_ids, None)
        planes = {pair: ImpactPlanes.from_encoding(docs, doc_ids, *pair) for pair in PAIRS}
        for split in ("train", "test") if name == "scifact" else ("test",):
            data = load_beir(data_dir, split)
            qids = [q for q in (x.query_id for x in data.queries) if q in data.qrels]
            rows = queries[np.array([row_of[q] for q in qids])]
            result = {"float weighted": ndcg(*weighted.search_encoded(rows, K, weights, "weighted"), doc_ids, qids,
                                             data.qrels),
                      "binary": ndcg(*weighted.search_encoded(rows, K, weights, "binary"), doc_ids, qids, data.qrels)}
            for pair, index in planes.items():
                result[f"planes {pair[0]}x{pair[1]}"] = ndcg(*index.search_encoded(rows, K, weights), doc_ids, qids,
                                                            data.qrels)
            kept = QueryWeighting.of_index(weighted, args.max_df).drop(rows)  # the Searcher's default
            result[f"binary, max_df {args.max_df:g}"] = ndcg(*weighted.search_encoded(kept, K, weights, "binary"),
                                                             doc_ids, qids, data.qrels)
            for pair, index in planes.items():
                result[f"planes {pair[0]}x{pair[1]}, max_df {args.max_df:g}"] = ndcg(
                    *index.search_encoded(kept, K, weights), doc_ids, qids, data.qrels)
            grids[f"{name}:{split}"] = result
            log(f"{name}:{split}: " + ", ".join(f"{k} {v:.4f}" for k, v in result.items()))
    train = grids["scifact:train"]
    chosen = max((k for k in train if k.startswith("planes") and "max_df" not in k), key=lambda k: train[k])
    return {"model_digest": model.digest(), "grids": grids, "chosen_on_scifact_train": chosen}


def plane_index_dir(n_docs: int, doc_bits: int, seed: int) -> Path:
    """Generate (once) the plane index of `n_docs` synthetic documents with random equal-frequency levels."""
    from benchmarks.lib.density import load_stats
    from benchmarks.lib.synthetic import SyntheticPostings

    from uhdsearch.index.writer import IndexWriter

    profile, _, digest = load_stats()
    directory = WORK_DIR / f"n{n_docs}-b{doc_bits}-seed{seed}-{digest}"
    if (directory / "done.json").is_file():
        return directory / "planes"
    synth = SyntheticPostings(profile, n_docs, seed=seed)
    rng = np.random.default_rng([seed, doc_bits])
    writer = IndexWriter(directory / "planes", "binary", dim=synth.dim * doc_bits, n_buckets=1, n_documents=n_docs,
                         overwrite=True)
    for block in synth.blocks(max_postings=1 << 24):
        n_dims = block.indptr.shape[0] - 1
        dims = np.repeat(np.arange(n_dims), np.diff(block.indptr))
        level = rng.integers(1, 1 << doc_bits, dims.shape[0])
        plane_dims, plane_docs = [], []
        for p in range(doc_bits):
            on = (level >> p) & 1 == 1
            plane_dims.append(dims[on] * doc_bits + p)
            plane_docs.append(block.docs[on])
        plane_dims, plane_docs = np.concatenate(plane_dims), np.concatenate(plane_docs)
        order = np.argsort(plane_dims, kind="stable")  # docs stay ascending within a plane
        counts = np.bincount(plane_dims, minlength=n_dims * doc_bits)
        writer.add_postings(0, block.first_dim * doc_bits, np.concatenate(([0], np.cumsum(counts))),
                            plane_docs[order])
    writer.close()
    (directory / "done.json").write_text(json.dumps({"n_documents": n_docs, "doc_bits": doc_bits}) + "\n")
    return directory / "planes"


def speed(args) -> list[dict]:
    from benchmarks.lib.density import load_stats
    from benchmarks.lib.timer import time_interleaved
    from benchmarks.lib.synthetic_binary import binary_index_dir

    _, queries, _ = load_stats()
    queries = queries[:args.n_queries]
    rows = []
    for n_docs in args.sizes:
        binary = InvertedIndex.load(binary_index_dir(n_docs, args.seed), mmap=True, verify=False)
        binary.warm_up()
        systems = {"binary": (lambda q: binary.search_encoded(q, K, [1.0], "binary", n_threads=1),
                              [queries[i:i + 1] for i in range(queries.n)])}
        for pair in [p for p in PAIRS if f"{p[0]}x{p[1]}" in args.pairs]:
            planes = InvertedIndex.load(plane_index_dir(n_docs, pair[0], args.seed), mmap=True, verify=False)
            planes.warm_up()
            expanded = query_planes(queries, *pair)
            systems[f"planes {pair[0]}x{pair[1]}"] = (
                lambda q, index=planes: index.search_encoded(q, K, [1.0], "quantized", n_threads=1),
                [expanded[i:i + 1] for i in range(expanded.n)])
        times = time_interleaved(systems, queries.n)
        base = float(np.median(times["binary"]))
        for name, t in times.items():
            rows.append({"system": name, "n_docs": n_docs, "p50_ms": round(float(np.median(t)), 3),
                         "x_binary": round(float(np.median(t)) / base, 3)})
            log(json.dumps(rows[-1]))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["quality", "speed"])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--data-root", type=Path)
    parser.add_argument("--collections", type=comma_list())
    parser.add_argument("--sizes", type=comma_list(int))
    parser.add_argument("--pairs", type=comma_list())
    parser.add_argument("--n-queries", type=int)
    args, config, settings = parse_args(parser, "impact_planes", argv)
    settings = {key: str(v) if isinstance(v, Path) else v for key, v in settings.items()}
    result = json.loads(OUT_JSON.read_text()) if OUT_JSON.is_file() else {}
    result.update({"script": "benchmarks/experiments/impact_planes.py", **record(config, settings)})
    start = time.time()
    load_start = os.getloadavg()
    if args.part == "quality":
        result["quality"] = quality(args)
        for key, grid in result["quality"]["grids"].items():
            print(f"{key:<16} " + "  ".join(f"{k} {v:.4f}" for k, v in grid.items()))
        print(f"chosen on SciFact train: {result['quality']['chosen_on_scifact_train']}")
    else:
        result["speed"] = {"threads": 1, "k": K, "rows": speed(args),
                           "load_average": [[round(x, 2) for x in load_start],
                                            [round(x, 2) for x in os.getloadavg()]]}
        print(f"{'system':<14} {'n_docs':>9} {'p50 ms':>8} {'x binary':>8}")
        for r in result["speed"]["rows"]:
            print(f"{r['system']:<14} {r['n_docs']:>9,} {r['p50_ms']:>8.3f} {r['x_binary']:>8.3f}")
    result[f"{args.part}_wall_s"] = round(time.time() - start, 1)
    OUT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {OUT_JSON}")


if __name__ == "__main__":
    main()
