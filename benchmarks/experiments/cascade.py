"""The cascade (search/cascade.py): nDCG@10 against exact search over a grid, then ms per query at 1M documents.

Chose the cascade's "auto" settings (search/cascade.py): a first pass over the dims at max_df 0.1 to depth 100
(0.1:300 for length-normalized scores), from 100,000 documents on.

quality: the quickstart model's encodings of SciFact, CISI and Medline (benchmarks/lib/encoded_cache.py), each alone
and with `n_distractors` dictionary definitions added of at most `max_chars` characters (studies/distractors.py, encoded by the same model: the size
at which "auto" turns the cascade on). Queries as the Searcher sends them by default (stop dims above max_df 0.3
dropped). Every grid cell and exact search, nDCG@10 and the share of exact search's top 10 kept; SciFact *train*
queries choose, test splits are scored in the same run and read only after the choice.

speed: the synthetic 1M binary index (benchmarks/lib/synthetic_binary.py) with the SciFact test queries encoded by the
same model, one thread, k = 10, exact search and every grid cell timed interleaved query by query, bm25s on
dictionary text of the same size in the same process. Cells read the second pass from doc-major rows (the default,
index/forward.py; their build time and size are recorded); `probe_cells` are timed probing the postings too.
Then the choice: the fastest cell whose SciFact-train nDCG@10 is at least exact search's both with the distractors
and alone (the distractors are short definitions, unlike the abstracts; a corpus of abstracts alone is the harder
case for the first pass, whose dims are then less rare).

    .venv/bin/python -m benchmarks.experiments.cascade quality    # ~15 min the first time (encodes 100k definitions)
    .venv/bin/python -m benchmarks.experiments.cascade speed      # quiet cores: the timings are the point

Writes benchmarks/results/cascade_quality.json and cascade.json (`--length-norm 0.3`: the same grid over
length-normalized scores, search/lengthnorm.py, into cascade_quality_ln0.3.json and cascade_ln0.3.json); prints
tables. Settings: configs/cascade.toml.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.experiments.impact_planes import ndcg
from benchmarks.lib.encoded_cache import encoded, encoded_texts
from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex
from uhdsearch.search.cascade import Cascade, cascade_search
from uhdsearch.search.stopdims import QueryWeighting
from uhdsearch.sparse import SparseEncoding

RESULTS = RESULTS


def result_paths(length_norm: float) -> tuple[Path, Path]:
    """(quality, speed) JSON: plain counts keep the first run's names, a length norm gets its own."""
    suffix = f"_ln{length_norm:g}" if length_norm else ""
    return RESULTS / f"cascade_quality{suffix}.json", RESULTS / f"cascade{suffix}.json"
K = 10


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cells(args) -> list[Cascade]:
    return [Cascade(f, d) for f in args.first_max_df for d in args.depth]


def label(cascade: Cascade | None) -> str:
    if cascade is None:
        return "exact"
    return f"{cascade.first_max_df:g}:{cascade.depth}" + ("" if cascade.forward else ":probe")


def stack(a: SparseEncoding, b: SparseEncoding) -> SparseEncoding:
    import scipy.sparse as sp

    return SparseEncoding([sp.vstack([x, y]).tocsr() for x, y in zip(a.buckets, b.buckets)])


def score_grid(index, queries: SparseEncoding, ids: list[str], qrels, weights, args) -> list[dict]:
    weighting = QueryWeighting.of_index(index, args.max_df)
    kept = weighting.drop(queries)
    dfs = weighting.document_frequencies
    exact_numbers, exact_scores = index.search_encoded(kept, K, weights, "binary", length_norm=args.length_norm)
    rows = []
    for cascade in [None] + cells(args):
        if cascade is None:
            numbers, scores = exact_numbers, exact_scores
        else:
            numbers, scores = cascade_search(index, kept, dfs, K, weights, "binary", cascade,
                                             length_norm=args.length_norm)
        kept_share = np.mean([len(set(a[a >= 0]) & set(b[b >= 0])) / max(1, int((b >= 0).sum()))
                              for a, b in zip(numbers, exact_numbers)])
        rows.append({"cascade": label(cascade), "nDCG@10": ndcg(numbers, scores, index.doc_ids, ids, qrels),
                     "exact_top10_kept": round(float(kept_share), 4)})
    return rows


def short_definitions(units, n: int, max_chars: int, seed: int) -> tuple[list[str], str]:
    """n seeded dictionary texts of at most max_chars characters: the long GCIDE entries would take hours to
    encode on 2 cores (8 a second, 256 tokens each), short ones about 100 a second."""
    short = [u for u in units if len(u) <= max_chars]
    order = np.random.default_rng(seed).permutation(len(short))[:n]
    return [short[i] for i in order], f"{n:,} of the {len(short):,} GCIDE entries and WordNet glosses of at most " \
                                      f"{max_chars} characters"


def quality(args, config, settings) -> None:
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.studies.distractors import dictionary_units

    start = time.time()
    model = UHDEncoder.from_pretrained(ROOT / args.model)
    texts, how = short_definitions(dictionary_units()[0], args.n_distractors, args.max_chars, args.seed)
    distractors = encoded_texts(model, f"dictionary-{args.n_distractors}-max{args.max_chars}-seed{args.seed}", texts)
    result = {"script": "benchmarks/experiments/cascade.py quality", **record(config, settings), "model_digest": model.digest(),
              "distractors": how, "grids": {}}
    for name in args.collections:
        data_dir = ROOT / args.data_root / name
        docs, doc_ids = encoded(model, data_dir, "document")
        queries, query_ids = encoded(model, data_dir, "query")
        row_of = {q: i for i, q in enumerate(query_ids)}
        for scale, (encoding, ids) in {"alone": (docs, doc_ids), f"+{args.n_distractors}": (
                stack(docs, distractors), doc_ids + [f"distractor-{i}" for i in range(distractors.n)])}.items():
            index = BinaryIndex.from_encoding(encoding, ids, None)
            for split in ("train", "test") if name == "scifact" else ("test",):
                data = load_beir(data_dir, split)
                qids = [q.query_id for q in data.queries if q.query_id in data.qrels]
                key = f"{name}:{split}:{scale}"
                rows = score_grid(index, queries[np.array([row_of[q] for q in qids])], qids, data.qrels,
                                  model.config.weights, args)
                result["grids"][key] = rows
                log(f"{key} ({index.n_documents:,} documents, {len(qids)} queries): "
                    + ", ".join(f"{r['cascade']} {r['nDCG@10']:.4f}" for r in rows))
    result["wall_s"] = round(time.time() - start, 1)
    quality_json = result_paths(args.length_norm)[0]
    quality_json.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {quality_json}")


def speed(args, config, settings) -> None:
    from benchmarks.lib.peers import bench_bm25s
    from benchmarks.lib.density import load_stats
    from benchmarks.lib.timer import time_interleaved
    from benchmarks.lib.synthetic_binary import binary_index_dir

    quality_json, speed_json = result_paths(args.length_norm)
    quality_result = json.loads(quality_json.read_text())
    _, queries, _ = load_stats()
    queries = queries[:args.n_queries]
    load_start = os.getloadavg()
    path = binary_index_dir(args.n_documents, args.seed)
    index = InvertedIndex.load(path, mmap=True, verify=False)  # exact search and the cells that probe
    index.warm_up()
    # one index object per first pass, each with its own doc-major rows (index/forward.py): a store built for a
    # lower first_max_df also serves higher ones, but its longer rows would slow their second pass
    forward, build_s, store_gb = {}, {}, {}
    for first in sorted({c.first_max_df for c in cells(args)}):
        forward[first] = InvertedIndex.load(path, mmap=True, verify=False)  # shares the page cache
        start = time.perf_counter()
        forward[first].keep_forward(first)
        build_s[f"{first:g}"] = round(time.perf_counter() - start, 2)
        store_gb[f"{first:g}"] = round(sum(s.nbytes for s in forward[first]._forward.stores) / 1e9, 3)
        log(f"doc-major rows above {first:g}: {build_s[f'{first:g}']} s, {store_gb[f'{first:g}']} GB")
    weighting = QueryWeighting.of_index(index, args.max_df)
    kept = weighting.drop(queries)
    dfs = weighting.document_frequencies
    rows = [kept[i:i + 1] for i in range(kept.n)]
    systems = {"exact": (lambda q: index.search_encoded(q, K, [1.0], "binary", n_threads=1,
                                                        length_norm=args.length_norm), rows)}
    probed = [Cascade(float(f), int(d), forward=False) for f, _, d in (c.partition(":") for c in args.probe_cells)]
    for cascade in cells(args) + probed:
        searched = forward[cascade.first_max_df] if cascade.forward else index
        systems[label(cascade)] = (
            lambda q, c=cascade, i=searched: cascade_search(i, q, dfs, K, [1.0], "binary", c, n_threads=1,
                                                            length_norm=args.length_norm), rows)
    times = time_interleaved(systems, kept.n)
    del index, forward, systems
    bm25 = bench_bm25s(args.n_documents, kept.n, args.seed)[0]
    # a probed cell ranks exactly as its doc-major twin: the same quality rows
    train = {r["cascade"]: r for r in quality_result["grids"][f"scifact:train:+{args.n_distractors}"]}
    alone = {r["cascade"]: r for r in quality_result["grids"]["scifact:train:alone"]}
    for cascade in probed:
        twin = label(Cascade(cascade.first_max_df, cascade.depth))
        train[label(cascade)], alone[label(cascade)] = train[twin], alone[twin]
    table = []
    for name, t in times.items():
        p50 = float(np.median(t))
        table.append({"cascade": name, "p50_ms": round(p50, 3), "p95_ms": round(float(np.quantile(t, 0.95)), 3),
                      "x_bm25s": round(p50 / bm25["p50_ms"], 4), "x_exact": round(p50 / np.median(times["exact"]), 3),
                      "train_nDCG@10": train[name]["nDCG@10"], "train_alone_nDCG@10": alone[name]["nDCG@10"]})
    floor, floor_alone = train["exact"]["nDCG@10"], alone["exact"]["nDCG@10"]
    eligible = [r for r in table if r["cascade"] != "exact" and not r["cascade"].endswith(":probe")
                and r["train_nDCG@10"] >= floor
                and r["train_alone_nDCG@10"] >= floor_alone]
    chosen = min(eligible, key=lambda r: r["p50_ms"])["cascade"] if eligible else None
    test = {key: next(r for r in rows if r["cascade"] == chosen) | {"exact": rows[0]["nDCG@10"]}
            for key, rows in quality_result["grids"].items() if ":test:" in key} if chosen else {}
    print(f"{'cascade':<10} {'p50 ms':>8} {'p95 ms':>8} {'x bm25s':>8} {'x exact':>8} {'train +N':>9} {'alone':>7}")
    for r in table:
        print(f"{r['cascade']:<10} {r['p50_ms']:>8.3f} {r['p95_ms']:>8.3f} {r['x_bm25s']:>8.4f} {r['x_exact']:>8.3f} "
              f"{r['train_nDCG@10']:>9.4f} {r['train_alone_nDCG@10']:>7.4f}")
    print(f"bm25s p50 {bm25['p50_ms']:.3f} ms; chosen (SciFact train nDCG@10 at least exact search's with distractors,"
          f" {floor:.4f}, and alone, {floor_alone:.4f}; then the fastest): {chosen}")
    for key, r in test.items():
        print(f"  {key}: exact {r['exact']:.4f}, cascade {r['nDCG@10']:.4f} (exact top 10 kept {r['exact_top10_kept']})")
    settings = {key: str(v) if isinstance(v, Path) else v for key, v in settings.items()}
    speed_json.write_text(json.dumps({
        "script": "benchmarks/experiments/cascade.py speed", **record(config, settings), "threads": 1, "k": K,
        "n_documents": args.n_documents, "n_queries": kept.n, "bm25s_p50_ms": round(bm25["p50_ms"], 3),
        "load_average_at_start": [round(x, 2) for x in load_start],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()], "forward_build_s": build_s,
        "forward_store_gb": store_gb, "rows": table, "chosen": chosen,
        "chosen_test": test}, indent=1) + "\n")
    log(f"wrote {speed_json}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["quality", "speed"])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--data-root", type=Path)
    parser.add_argument("--collections", type=comma_list())
    parser.add_argument("--n-distractors", type=int)
    parser.add_argument("--first-max-df", type=comma_list(float))
    parser.add_argument("--depth", type=comma_list(int))
    parser.add_argument("--n-documents", type=int)
    parser.add_argument("--n-queries", type=int)
    parser.add_argument("--length-norm", type=float)
    parser.add_argument("--probe-cells", type=comma_list())
    args, config, settings = parse_args(parser, "cascade", argv)
    settings = {key: str(v) if isinstance(v, Path) else v for key, v in settings.items()}
    (quality if args.part == "quality" else speed)(args, config, settings)


if __name__ == "__main__":
    main()
