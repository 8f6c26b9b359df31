"""Label-free early stopping, checked on a collection that has labels: do teacher-judged corpus queries pick the
training step that real judged queries would pick?

Chose the label-free dev judge: the dense backbone's top 10 (`Recipe(teacher="dense", judged_depth=10)`).

CISI and Medline have no train qrels, so the recipe (training/recipe.py) trains on the corpus's own ICT pairs and
stops early on a held-out slice of those corpus queries judged by a teacher (its top `judged_depth` documents and
the sentence's source passage). On CISI and Medline that dev split has not predicted test (README, "What training
earns"). Here SciFact is trained the same way, as if it had no labels (`use_train_qrels=False`: ICT pairs only,
the quickstart's recipe otherwise), and every dev check scores the model by each label-free judge (each teacher
at each depth, and the source passage alone) *and* by SciFact's real train queries and qrels, none of which
trained the model. A judge is as good as the step it picks is by the real labels; the rank correlation of each
judge with the real score over the checks is printed too. Test queries are not read.

    .venv/bin/python -m benchmarks.experiments.dev_proxies     # ~15 min on 2 cores

Writes benchmarks/results/dev_proxies.json; prints a table. Settings: configs/dev_proxies.toml.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import compute_token_states
from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.search.searcher import Searcher
from uhdsearch.recipes.presets import preset
from uhdsearch.recipes.recipe import build_teacher, dev_evaluator, teacher_judged, training_pairs
from uhdsearch.training.trainer import train

RESULT_JSON = RESULTS / "dev_proxies.json"
REAL = "real labels (train qrels)"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def shared_scorer(states, documents, queries, qrels_by_judge: dict, n_documents: int, length_norm: float):
    """model -> {judge: nDCG@10}: UHD-binary over every judge's judged documents plus a random sample of the others
    (training/recipe.py's dev_evaluator, with one sample and one search for all judges)."""
    judged = {d for qrels in qrels_by_judge.values() for rel in qrels.values() for d in rel}
    rows = [i for i, d in enumerate(documents) if d.doc_id in judged]
    others = [i for i, d in enumerate(documents) if d.doc_id not in judged]
    rows = sorted(rows + random.Random(0).sample(others, max(0, min(len(others), n_documents))))
    doc_ids = [documents[i].doc_id for i in rows]

    def score(model) -> dict[str, float]:
        index = BinaryIndex.from_encoding(model.encode_states(states, show_progress=False, rows=rows), doc_ids, None)
        run = Searcher(model, index, "binary", max_df=None, length_norm=length_norm or None).search(queries, k=100)
        return {label: float(evaluate(run, qrels, ["nDCG@10"])["nDCG@10"]) for label, qrels in qrels_by_judge.items()}

    return score


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--judged-depth", type=comma_list(int))
    parser.add_argument("--teachers", type=comma_list())
    args, config, settings = parse_args(parser, "dev_proxies", argv)
    torch.set_num_threads(args.threads)
    start = time.time()
    data_dir = ROOT / args.data_dir if not Path(args.data_dir).is_absolute() else Path(args.data_dir)
    data = load_beir(data_dir, "train")  # the corpus and the train queries; the test split is never loaded
    documents = list(data.corpus.values())
    recipe = preset("quickstart", use_train_qrels=False, max_steps=args.max_steps, eval_every=args.eval_every,
                    query_lengths=(), dev_length_norm=args.dev_length_norm)
    backbone = Backbone.from_pretrained(None)
    model = UHDEncoder(backbone, recipe.encoder)
    layers = sorted(set(model.layers) | {backbone.n_layers})
    states = compute_token_states(backbone, [d.full_text for d in documents], layers,
                                  recipe.encoder.document_max_length, desc="backbone")
    model.center_buckets(states)
    pairs, dev = training_pairs(documents, None, recipe)  # ICT pairs, a held-out slice of their queries
    heads = states.select(list(model.layers))
    judges = {"source passage only": dev}
    for name in args.teachers:
        teacher = build_teacher(name, backbone, documents, states)
        for depth in args.judged_depth:
            log(f"judging {len(dev[0])} dev queries by {name}, top {depth}")
            judges[f"{name}, top {depth}"] = teacher_judged(teacher, documents, dev, depth)
    # One document sample and one search of the dev queries per check, scored against every judge's qrels (the
    # judges share the queries); the real train queries get their own sample, as dev_evaluator draws it.
    dev_score = shared_scorer(heads, documents, dev[0], {label: split[1] for label, split in judges.items()},
                              1_000, args.dev_length_norm)
    real_score = dev_evaluator(heads, documents, (data.queries, data.qrels), n_documents=args.real_documents,
                               length_norm=args.dev_length_norm)
    checks: list[dict] = []

    def eval_fn(m) -> float:
        row = {**dev_score(m), REAL: float(real_score(m))}
        checks.append(row)
        log(f"check {len(checks) - 1}: " + ", ".join(f"{k} {v:.4f}" for k, v in row.items()))
        return row[REAL]  # keeps the best real-label step; the judges' picks are read off the checks below

    result = train(model, documents, pairs, recipe.training, document_states=states, eval_fn=eval_fn,
                   show_progress=True)
    steps = [s for s, _ in result.evals]
    real = np.array([c[REAL] for c in checks])
    rows = []
    for label in [*judges, REAL]:
        values = np.array([c[label] for c in checks])
        pick = int(np.argmax(values))  # the first of equal scores: step 0 wins ties, as in training
        rho = float(spearmanr(values, real).statistic) if label != REAL else 1.0
        rho = None if math.isnan(rho) else rho  # a judge whose score never moved
        rows.append({"judge": label, "picked_step": steps[pick], "real_at_pick": round(float(real[pick]), 4),
                     "real_vs_step0": round(float(real[pick] - real[0]), 4), "spearman_with_real": None if rho is None else round(rho, 3),
                     "curve": [round(float(v), 4) for v in values]})
    print(f"{'dev judge':<28} {'picks step':>10} {'real nDCG@10 there':>19} {'vs step 0':>10} {'Spearman':>9}")
    for r in rows:
        print(f"{r['judge']:<28} {r['picked_step']:>10} {r['real_at_pick']:>19.4f} {r['real_vs_step0']:>+10.4f} "
              f"{r['spearman_with_real'] if r['spearman_with_real'] is not None else float('nan'):>9.3f}")
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in settings.items()}
    RESULT_JSON.write_text(json.dumps({
        "script": "benchmarks/experiments/dev_proxies.py", **record(config, settings), "steps": steps,
        "n_pairs": len(pairs), "n_dev_queries": len(dev[0]), "n_real_queries": len(data.queries), "rows": rows,
        "wall_s": round(time.time() - start, 1)}, indent=1) + "\n")
    log(f"wrote {RESULT_JSON}")


if __name__ == "__main__":
    main()
