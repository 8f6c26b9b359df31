"""The WTA top-k's tie rule (encoder/winners.py) against torch.topk's unspecified one: how many documents change,
and nDCG@10 both ways, from the same cached backbone states (benchmarks/encoded_cache.token_states).

Chooses no default: an equality check; the kernel's tie rule (lower dim first) stays.

bfloat16 scores tie at the k-th place for about half of all tokens, so torch.topk's arbitrary pick and the kernel's
(lower dim first) give different winners there; this measures whether that moves quality. An equality check, not
a choice: test splits are scored.

    .venv/bin/python -m benchmarks.experiments.tie_rule [--collections cisi,medline]

Prints a table and writes benchmarks/results/tie_rule.json.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

from benchmarks.lib.encoded_cache import load_model, token_states
from benchmarks.lib.settings import RESULTS, ROOT, comma_list, record
import uhdsearch.encoder.wta as wta_module
from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.base import hits_per_query
from uhdsearch.index.inverted import WeightedIndex
from uhdsearch.types import Run, ScoredDoc

OUT_JSON = RESULTS / "tie_rule.json"


def _torch_topk(z: torch.Tensor, k: int):
    values, indices = torch.topk(z, k, dim=1, sorted=False)
    return values.float(), indices


def ndcg(index, queries, ids, qrels, scoring: str) -> float:
    numbers, scores = index.search_encoded(queries, 100, [1.0], scoring)
    run = Run({q: [ScoredDoc(d, s) for d, s in hits]
               for q, hits in zip(ids, hits_per_query(numbers, scores, index.doc_ids))}, scoring)
    return round(evaluate(run, qrels, ["nDCG@10"])["nDCG@10"], 4)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="../main/out/quickstart/model", help='a model directory or "untrained"')
    parser.add_argument("--data-root", default="../shared/data")
    parser.add_argument("--collections", type=comma_list(), default=["cisi", "medline"])
    parser.add_argument("--seed", type=int, default=0, help="of the untrained model's centring sample")
    args = parser.parse_args(argv)
    model = load_model(args.model, args.data_root, args.seed)
    rows = []
    for name in args.collections:
        data_dir = ROOT / args.data_root / name
        doc_states, _, doc_ids = token_states(model, data_dir, "document")
        query_states, _, query_ids = token_states(model, data_dir, "query")
        data = load_beir(data_dir, "test")
        ids = [q.query_id for q in data.queries if q.query_id in data.qrels]
        row_of = {q: i for i, q in enumerate(query_ids)}
        encoded = {}
        for rule, topk in (("torch.topk", _torch_topk), ("kernel", wta_module.top_winners)):
            original, wta_module.top_winners = wta_module.top_winners, topk
            try:
                docs = model.encode_states(doc_states, "document", show_progress=False)
                queries = model.encode_states(query_states, "query", show_progress=False)
            finally:
                wta_module.top_winners = original
            encoded[rule] = docs
            index = WeightedIndex.from_encoding(docs, doc_ids, None)
            picked = queries[np.array([row_of[q] for q in ids])]
            rows.append({"collection": name, "rule": rule, "binary": ndcg(index, picked, ids, data.qrels, "binary"),
                         "weighted": ndcg(index, picked, ids, data.qrels, "weighted"),
                         "doc_active_dims": round(float(docs.active_per_row().mean()), 1)})
        a, b = encoded["torch.topk"].buckets[0], encoded["kernel"].buckets[0]
        changed = np.array([not np.array_equal(a[i].indices, b[i].indices) for i in range(a.shape[0])])
        jaccard = [len(np.intersect1d(a[i].indices, b[i].indices)) / max(1, len(np.union1d(a[i].indices, b[i].indices)))
                   for i in range(a.shape[0])]
        rows[-1].update(docs_changed=round(float(changed.mean()), 4), mean_jaccard=round(float(np.mean(jaccard)), 5))
        print(json.dumps(rows[-2]), json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(f"{'collection':<10} {'rule':<11} {'binary':>7} {'weighted':>8} {'dims/doc':>8} {'docs changed':>12} "
          f"{'Jaccard':>8}")
    for r in rows:
        print(f"{r['collection']:<10} {r['rule']:<11} {r['binary']:>7.4f} {r['weighted']:>8.4f} "
              f"{r['doc_active_dims']:>8.0f} {r.get('docs_changed', ''):>12} {r.get('mean_jaccard', ''):>8}")
    OUT_JSON.write_text(json.dumps({"script": "benchmarks/experiments/tie_rule.py", "model": args.model,
                                    "model_digest": model.digest(), "rows": rows,
                                    **record(None, vars(args))}, indent=1) + "\n")
    print(f"wrote {OUT_JSON}")


if __name__ == "__main__":
    main()
