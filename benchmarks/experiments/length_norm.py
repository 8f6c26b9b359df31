"""Length-normalized binary scores (search/lengthnorm.py): alpha chosen on SciFact train, test once, and speed.

Chose --length-norm 0.3 (search/lengthnorm.py LENGTH_NORM).

quality: the quickstart model's encodings of SciFact, CISI and Medline (benchmarks/lib/encoded_cache.py), each alone and
with `n_distractors` short dictionary definitions (as benchmarks/experiments/cascade.py), binary search with the Searcher's
stop dimensions (`max_df`) for every alpha of the grid. The rule: the alpha with the highest mean SciFact *train*
nDCG@10 alone and with the distractors; ties keep the smaller. (The first run's rule used SciFact train alone and
picked 0.4; the same run's train grid with distractors showed 0.4 losing to 0.2-0.3 once short documents are mixed
in, so the rule takes both, as benchmarks/experiments/cascade.py's does; that run had printed the test grids too, which the
README says.) Test splits are scored in the same run and reported at the chosen alpha against alpha 0 (plain
counts). `own_models`: each collection's own quickstart model
(`uhdsearch quickstart --data DIR`), scored on its test split at alpha 0 and the chosen alpha.

untrained: what training earns under each score. For each collection, the untrained centred head
(studies/untrained.py, built once under .cache/studies) and the shipped quickstart model (`shipped`, its directory
with model/ and index-binary/), both with the shipped model's query token limit, searched by the Searcher with
plain counts and with the default normalization; test nDCG@10. `--result-key untrained_devnorm --shipped
scifact=../main/out/quickstart-devnorm,...`: the same for the quickstarts whose dev checks score the normalized
search (session 15), kept beside the first rows.

speed: the synthetic 1M binary index (benchmarks/lib/synthetic_binary.py) with the SciFact test queries of the stats
file, one thread, k = 10: exact and cascade search, plain and normalized, timed interleaved query by query, and
bm25s in the same run.

    .venv/bin/python -m benchmarks.experiments.length_norm quality
    .venv/bin/python -m benchmarks.experiments.length_norm untrained # ~6 min the first time (builds the untrained heads)
    .venv/bin/python -m benchmarks.experiments.length_norm speed     # quiet cores

Writes benchmarks/results/length_norm.json (each part keeps the other's rows). Settings:
benchmarks/configs/length_norm.toml.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.experiments.cascade import short_definitions, stack
from benchmarks.experiments.impact_planes import ndcg
from benchmarks.lib.encoded_cache import encoded, encoded_texts
from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex
from uhdsearch.search.cascade import Cascade, cascade_search
from uhdsearch.search.stopdims import QueryWeighting

RESULT_JSON = RESULTS / "length_norm.json"
K = 10


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def grid(index, queries, qids, qrels, weights, alphas, max_df) -> dict[str, float]:
    kept = QueryWeighting.of_index(index, max_df).drop(queries)
    return {f"{a:g}": ndcg(*index.search_encoded(kept, K, weights, "binary", length_norm=a), index.doc_ids, qids,
                           qrels) for a in alphas}


def cascaded(index, queries, qids, qrels, weights, alpha, max_df) -> float:
    """nDCG@10 of the default cascade (0.1:100) with length normalization `alpha` in both passes."""
    weighting = QueryWeighting.of_index(index, max_df)
    found = cascade_search(index, weighting.drop(queries), weighting.document_frequencies, K, weights, "binary",
                           Cascade(), length_norm=alpha)
    return ndcg(*found, index.doc_ids, qids, qrels)


def split_queries(model, data_dir: Path, split: str):
    queries, query_ids = encoded(model, data_dir, "query")
    row_of = {q: i for i, q in enumerate(query_ids)}
    data = load_beir(data_dir, split)
    qids = [q.query_id for q in data.queries if q.query_id in data.qrels]
    return queries[np.array([row_of[q] for q in qids])], qids, data.qrels


def quality(args, config, settings) -> dict:
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.studies.distractors import dictionary_units

    model = UHDEncoder.from_pretrained(ROOT / args.model)
    texts, how = short_definitions(dictionary_units()[0], args.n_distractors, args.max_chars, args.seed)
    distractors = encoded_texts(model, f"dictionary-{args.n_distractors}-max{args.max_chars}-seed{args.seed}", texts)
    grids = {}
    for name in args.collections:
        data_dir = ROOT / args.data_root / name
        docs, doc_ids = encoded(model, data_dir, "document")
        for scale, (encoding, ids) in {"alone": (docs, doc_ids), f"+{args.n_distractors}": (
                stack(docs, distractors), doc_ids + [f"distractor-{i}" for i in range(distractors.n)])}.items():
            index = BinaryIndex.from_encoding(encoding, ids, None)
            lengths = index.document_lengths()
            for split in ("train", "test") if name == "scifact" else ("test",):
                key = f"{name}:{split}:{scale}"
                grids[key] = grid(index, *split_queries(model, data_dir, split), model.config.weights, args.alpha,
                                  args.max_df)
                log(f"{key} ({index.n_documents:,} documents, active dims per document median "
                    f"{np.median(lengths):.0f}): " + ", ".join(f"{a} {v:.4f}" for a, v in grids[key].items()))
    alone, mixed = grids["scifact:train:alone"], grids[f"scifact:train:+{args.n_distractors}"]
    chosen = max(args.alpha, key=lambda a: (alone[f"{a:g}"] + mixed[f"{a:g}"], -a))
    cascade = {}  # the default cascade (on from 100k documents) at alpha 0 and the chosen alpha, with distractors
    for name in args.collections:
        data_dir = ROOT / args.data_root / name
        docs, doc_ids = encoded(model, data_dir, "document")
        index = BinaryIndex.from_encoding(stack(docs, distractors),
                                          doc_ids + [f"distractor-{i}" for i in range(distractors.n)], None)
        for split in ("train", "test") if name == "scifact" else ("test",):
            split_data = split_queries(model, data_dir, split)
            cascade[f"{name}:{split}:+{args.n_distractors}"] = {
                f"{a:g}": cascaded(index, *split_data, model.config.weights, a, args.max_df) for a in (0.0, chosen)}
    own = {}
    for entry in args.own_models:
        name, _, path = entry.partition("=")
        own_model = UHDEncoder.from_pretrained(ROOT / path)
        data_dir = ROOT / args.data_root / name
        docs, doc_ids = encoded(own_model, data_dir, "document")
        index = BinaryIndex.from_encoding(docs, doc_ids, None)
        own[name] = {"model": path, "model_digest": own_model.digest(),
                     **grid(index, *split_queries(own_model, data_dir, "test"), own_model.config.weights,
                            sorted({0.0, chosen}), args.max_df)}
        log(f"{name} own model {path}: {own[name]}")
    return {"script": "benchmarks/experiments/length_norm.py", **record(config, settings), "model_digest": model.digest(),
            "distractors": how, "grids": grids, "chosen_alpha": chosen, "cascade_0.1:100": cascade,
            "rule": "highest mean SciFact train nDCG@10 alone and with the distractors; ties keep the smaller alpha", "own_models": own}


def speed(args, config, settings, result: dict) -> dict:
    from benchmarks.lib.peers import bench_bm25s
    from benchmarks.lib.density import load_stats
    from benchmarks.lib.timer import time_interleaved
    from benchmarks.lib.synthetic_binary import binary_index_dir

    alpha = result["chosen_alpha"]
    _, queries, _ = load_stats()
    queries = queries[:args.n_queries]
    load_start = os.getloadavg()
    index = InvertedIndex.load(binary_index_dir(args.n_documents, args.seed), mmap=True, verify=False)
    index.warm_up()
    start = time.perf_counter()
    index.length_scales(alpha)
    lengths_s = time.perf_counter() - start
    weighting = QueryWeighting.of_index(index, args.max_df)
    kept = weighting.drop(queries)
    dfs = weighting.document_frequencies
    rows = [kept[i:i + 1] for i in range(kept.n)]
    systems = {}
    for a in (0.0, alpha):
        systems[f"exact ln{a:g}"] = (
            lambda q, a=a: index.search_encoded(q, K, [1.0], "binary", n_threads=1, length_norm=a), rows)
        systems[f"cascade 0.1:100 ln{a:g}"] = (
            lambda q, a=a: cascade_search(index, q, dfs, K, [1.0], "binary", Cascade(), n_threads=1, length_norm=a),
            rows)
    times = time_interleaved(systems, kept.n)
    del index
    bm25 = bench_bm25s(args.n_documents, kept.n, args.seed)[0]
    table = [{"system": name, "p50_ms": round(float(np.median(t)), 3), "p95_ms": round(float(np.quantile(t, 0.95)), 3),
              "x_bm25s": round(float(np.median(t)) / bm25["p50_ms"], 4)} for name, t in times.items()]
    print(f"{'system':<24} {'p50 ms':>8} {'p95 ms':>8} {'x bm25s':>8}")
    for r in table:
        print(f"{r['system']:<24} {r['p50_ms']:>8.3f} {r['p95_ms']:>8.3f} {r['x_bm25s']:>8.4f}")
    print(f"bm25s p50 {bm25['p50_ms']:.3f} ms; document lengths counted in {lengths_s:.1f} s")
    return {"threads": 1, "k": K, "n_documents": args.n_documents, "n_queries": kept.n,
            "bm25s_p50_ms": round(bm25["p50_ms"], 3), "lengths_s": round(lengths_s, 2),
            "load_average_at_start": [round(x, 2) for x in load_start],
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()], "rows": table}


def untrained(args) -> dict:
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.metrics import evaluate
    from uhdsearch.search.searcher import Searcher
    from uhdsearch.studies.untrained import untrained_dir

    rows = {}
    for entry in args.shipped:
        name, _, path = entry.partition("=")
        data_dir = ROOT / args.data_root / name
        data = load_beir(data_dir, "test")
        length = UHDEncoder.from_pretrained(ROOT / path / "model").config.query_max_length
        row = {"shipped": path, "query_max_length": length}
        for label, directory in (("untrained", untrained_dir(data_dir, ROOT / ".cache" / "studies")),
                                 ("shipped", ROOT / path)):
            model = UHDEncoder.from_pretrained(directory / "model", query_max_length=length)
            index = InvertedIndex.load(directory / "index-binary")
            row[f"{label}_digest"] = model.digest()
            for score, value in (("plain", None), ("normalized", "auto")):
                run = Searcher(model, index, "binary", length_norm=value).search(data.queries, k=100)
                row[f"{label}_{score}"] = round(evaluate(run, data.qrels, ["nDCG@10"])["nDCG@10"], 4)
        rows[name] = row
        log(f"{name}: {row}")
    print(f"{'collection':<10} {'untrained plain':>16} {'shipped plain':>14} {'untrained norm':>15} {'shipped norm':>13}")
    for name, r in rows.items():
        print(f"{name:<10} {r['untrained_plain']:>16.4f} {r['shipped_plain']:>14.4f} {r['untrained_normalized']:>15.4f} "
              f"{r['shipped_normalized']:>13.4f}")
    return rows


def report(result: dict) -> None:
    alpha = f"{result['chosen_alpha']:g}"
    print(f"chosen alpha {alpha} ({result['rule']}); nDCG@10 plain -> normalized:")
    for key, row in result["grids"].items():
        print(f"  {key:<24} {row['0']:.4f} -> {row[alpha]:.4f} ({row[alpha] - row['0']:+.4f})")
    for key, row in result["cascade_0.1:100"].items():
        print(f"  {key:<24} cascade 0.1:100: {row['0']:.4f} -> {row[alpha]:.4f} (exact normalized "
              f"{result['grids'][key][alpha]:.4f})")
    for name, row in result["own_models"].items():
        print(f"  {name} own model (test)    {row['0']:.4f} -> {row[alpha]:.4f} ({row[alpha] - row['0']:+.4f})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["quality", "untrained", "speed"])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--data-root", type=Path)
    parser.add_argument("--collections", type=comma_list())
    parser.add_argument("--own-models", type=comma_list())
    parser.add_argument("--shipped", type=comma_list())
    parser.add_argument("--alpha", type=comma_list(float))
    parser.add_argument("--n-documents", type=int)
    parser.add_argument("--n-queries", type=int)
    parser.add_argument("--result-key", default="untrained",
                        help="untrained: the key of the results file it writes (e.g. for another set of shipped models)")
    args, config, settings = parse_args(parser, "length_norm", argv)
    settings = {key: str(v) if isinstance(v, Path) else v for key, v in settings.items()}
    previous = json.loads(RESULT_JSON.read_text()) if RESULT_JSON.exists() else {}
    if args.part == "quality":
        start = time.time()
        result = quality(args, config, settings) | {k: v for k, v in previous.items()
                                                      if k == "speed" or k.startswith("untrained")}
        result["wall_s"] = round(time.time() - start, 1)
        report(result)
    elif args.part == "untrained":
        result = previous | {args.result_key: untrained(args)}
    else:
        if "chosen_alpha" not in previous:
            raise SystemExit(f"run `benchmarks/experiments/length_norm.py quality` first: {RESULT_JSON} has no chosen alpha")
        result = previous | {"speed": speed(args, config, settings, previous)}
    RESULT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {RESULT_JSON}")


if __name__ == "__main__":
    main()
