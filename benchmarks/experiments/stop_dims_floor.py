"""How small may an index be before a stop-dimension threshold (a share of its documents) stops helping?

Chose the floor of 1,000 documents below which max_df "auto" drops nothing (search/stopdims.py MIN_DOCUMENTS).

`max_df` drops the query dims active in more than that share of the index's documents; on a 3-document index
every dim used by one document is above 0.3, so a default needs a floor below which it is off. This picks the
floor on SciFact's *train* queries: seeded sub-corpora of N documents (half of them judged relevant to some train
query, half others), binary nDCG@10 of the train queries with a relevant document inside, without a threshold and
at `max_df`, brute force over the cached encodings. The floor is the smallest N from which on the threshold's mean
nDCG@10 is at least that of no threshold at every larger N.

    .venv/bin/python -m benchmarks.experiments.stop_dims_floor

Prints a table and writes benchmarks/results/stop_dims_floor.json. Settings: benchmarks/configs/stop_dims_floor.toml.
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
from uhdsearch.types import Run, ScoredDoc

OUT_JSON = RESULTS / "stop_dims_floor.json"


def sub_corpus(n: int, relevant: np.ndarray, others: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """N document rows: up to half judged relevant to some train query, the rest drawn from the others."""
    n_rel = min(len(relevant), n // 2 or 1)
    return np.sort(np.concatenate([rng.choice(relevant, n_rel, replace=False),
                                   rng.choice(others, n - n_rel, replace=False)]))


def ndcg(queries, docs, query_ids, doc_ids, qrels, max_df: float | None) -> tuple[float, float]:
    """Binary-overlap nDCG@10 of `queries` over `docs` (CSR, first bucket), and the share of query dims dropped."""
    q, d = queries.copy(), docs.copy()
    q.data[:], d.data[:] = 1.0, 1.0
    df = np.bincount(d.indices, minlength=d.shape[1])
    kept_dims = np.ones(d.shape[1], bool) if max_df is None else df <= max_df * d.shape[0]
    keep = kept_dims[q.indices]
    dropped = 1.0 - keep.mean() if keep.size else 0.0
    q.data = keep.astype(np.float32)
    scores = (q @ d.T).toarray()
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    run = Run({qid: [ScoredDoc(doc_ids[j], float(scores[i, j])) for j in top[i]] for i, qid in enumerate(query_ids)},
              "binary")
    return evaluate(run, qrels, ["nDCG@10"])["nDCG@10"], float(dropped)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--sizes", type=comma_list(int))
    parser.add_argument("--seeds", type=int)
    parser.add_argument("--max-df", type=float)
    args, config, settings = parse_args(parser, "stop_dims_floor", argv)
    from uhdsearch.encoder.model import UHDEncoder

    start = time.time()
    model = UHDEncoder.from_pretrained(ROOT / args.model)
    data_dir = ROOT / args.data
    train = load_beir(data_dir, "train")
    docs, doc_ids = encoded(model, data_dir, "document", ROOT / args.index)
    queries, query_ids = encoded(model, data_dir, "query")
    docs, queries = docs.buckets[0].tocsr(), queries.buckets[0].tocsr()
    row_of_doc = {d: i for i, d in enumerate(doc_ids)}
    row_of_query = {q: i for i, q in enumerate(query_ids)}
    judged = {q: {d for d, g in rel.items() if g > 0 and d in row_of_doc} for q, rel in train.qrels.items()}
    relevant = np.array(sorted({row_of_doc[d] for ds in judged.values() for d in ds}))
    others = np.setdiff1d(np.arange(len(doc_ids)), relevant)
    rows = []
    for n in sorted(args.sizes):
        per_seed = []
        for seed in range(args.seeds):
            rng = np.random.default_rng(seed)
            picked = sub_corpus(min(n, len(doc_ids)), relevant, others, rng)
            inside = set(picked.tolist())
            ids = [q for q, ds in judged.items() if any(row_of_doc[d] in inside for d in ds) and q in row_of_query]
            sub_ids = [doc_ids[j] for j in picked]
            qrels = {q: train.qrels[q] for q in ids}
            qm = queries[np.array([row_of_query[q] for q in ids])]
            none, _ = ndcg(qm, docs[picked], ids, sub_ids, qrels, None)
            cut, dropped = ndcg(qm, docs[picked], ids, sub_ids, qrels, args.max_df)
            per_seed.append((none, cut, dropped, len(ids)))
            if n >= len(doc_ids):
                break  # the whole corpus: every seed is the same
        a = np.array(per_seed)
        rows.append({"n_documents": min(n, len(doc_ids)), "seeds": len(per_seed), "queries": a[:, 3].mean().round(1),
                     "none": round(float(a[:, 0].mean()), 4), "max_df": round(float(a[:, 1].mean()), 4),
                     "change": round(float((a[:, 1] - a[:, 0]).mean()), 4),
                     "query_dims_dropped": round(float(a[:, 2].mean()), 3)})
        print(f"N {rows[-1]['n_documents']:>6}  queries {rows[-1]['queries']:>6}  none {rows[-1]['none']:.4f}  "
              f"max_df {args.max_df:g}: {rows[-1]['max_df']:.4f} ({rows[-1]['change']:+.4f})  "
              f"query dims dropped {rows[-1]['query_dims_dropped']:.1%}", flush=True)
    floor = None
    for r in reversed(rows):  # the smallest N from which on the threshold never loses
        if r["change"] < 0:
            break
        floor = r["n_documents"]
    settings = {key: str(v) if isinstance(v, Path) else v for key, v in settings.items()}
    result = {"script": "benchmarks/experiments/stop_dims_floor.py", **record(config, settings), "model_digest": model.digest(),
              "split": "train", "rows": rows, "floor": floor, "wall_s": round(time.time() - start, 1)}
    print(f"floor: max_df {args.max_df:g} applies from {floor} documents on")
    OUT_JSON.parent.mkdir(parents=True, exist_ok=True)
    OUT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT_JSON}", file=sys.stderr)


if __name__ == "__main__":
    main()
