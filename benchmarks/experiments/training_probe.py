"""First probe of issue 16's objectives on SciFact: does any beat the untrained centred head on a DEV split?

Chose the recipe's objective: InfoNCE through the binarized buckets (straight-through), lr 1e-3
(training/recipe.py `Recipe.training`).

Frozen MiniLM, token states computed once (cached in --cache-dir as .npy), dim 32,768, wta_k 40, centred heads.
Dev = 10 % of SciFact's TRAIN queries (the quickstart's split, seed 0); it is scored over its positives plus
sampled documents (up to 1,000 in all, as the quickstart's dev evaluator). The test split is never read.
These settings and the recipes come from benchmarks/configs/training_probe.toml (--config).

    nice -n 10 python -m benchmarks.experiments.training_probe            # table on stdout, JSON in benchmarks/results/
"""
from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.lib.settings import RESULTS, parse_args, record
from uhdsearch.baselines.dense import mean_pool
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import TokenStates, compute_token_states
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.io import write_json
from uhdsearch.search.searcher import Searcher
from uhdsearch.training.data import ict_pairs, pairs_from_qrels
from uhdsearch.training.negatives import teacher_negatives
from uhdsearch.recipes.teachers import CachedTeacher, DenseTeacher, rank_with_teacher
from uhdsearch.training.trainer import TrainingArgs, train

RESULT_JSON = RESULTS / "training_probe_scifact.json"


def cached_states(backbone, texts, layer: int, max_length: int, path: Path) -> TokenStates:
    """Token states of one layer, read from / written to `path`.*.npy (bfloat16 kept as its uint16 bits)."""
    files = [Path(f"{path}.{n}.npy") for n in ("states", "offsets", "spans")]
    if all(f.is_file() for f in files):
        bits, offsets, spans = (np.load(f, allow_pickle=False) for f in files)
        if offsets.shape[0] == len(texts) + 1:
            return TokenStates([layer], [torch.from_numpy(bits).view(torch.bfloat16)], offsets, spans)
    states = compute_token_states(backbone, texts, [layer], max_length, desc=path.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    for f, a in zip(files, (states.states[0].view(torch.int16).numpy(), states.offsets, states.char_spans)):
        np.save(f, a, allow_pickle=False)
    return states


def dev_evaluator(states, documents, queries, qrels, n_documents: int = 1_000, seed: int = 0):
    judged = {d for rel in qrels.values() for d in rel}
    rows = [i for i, d in enumerate(documents) if d.doc_id in judged]
    others = [i for i, d in enumerate(documents) if d.doc_id not in judged]
    rows = sorted(rows + random.Random(seed).sample(others, max(0, n_documents - len(rows))))
    doc_ids = [documents[i].doc_id for i in rows]

    def score(model, both: bool = False):
        encoded = model.encode_states(states, show_progress=False, rows=rows)
        def ndcg(index, variant: str) -> float:  # the model's own score: no stop dimensions
            run = Searcher(model, index, variant, max_df=None, length_norm=None).search(queries, k=100)
            return evaluate(run, qrels, ["nDCG@10"])["nDCG@10"]

        binary = ndcg(BinaryIndex.from_encoding(encoded, doc_ids, None), "binary")
        if not both:
            return binary
        weighted = ndcg(WeightedIndex.from_encoding(encoded, doc_ids, None), "weighted")
        active = encoded.active_per_row().sum(axis=1)
        return binary, weighted, float(active.mean())

    return score


def test_scores(model, doc_states, documents, test_data) -> dict[str, float]:
    """nDCG@10 on the test split over the whole corpus, binary and weighted (one look, after choosing on dev)."""
    encoded = model.encode_states(doc_states, show_progress=False)
    doc_ids = [d.doc_id for d in documents]
    scores = {}
    for variant, klass in (("binary", BinaryIndex), ("weighted", WeightedIndex)):
        index = klass.from_encoding(encoded, doc_ids, None)
        run = Searcher(model, index, variant, max_df=None, length_norm=None).search(test_data.queries, k=100)
        scores[f"test_{variant}"] = evaluate(run, test_data.qrels, ["nDCG@10"])["nDCG@10"]
    return scores


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", default="/tmp/uhd-probe-cache", help="(default: %(default)s)")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--max-minutes", type=float)
    parser.add_argument("--eval-every", type=int)
    parser.add_argument("--only", nargs="*", help="recipe names to run (default: every one of --config)")
    parser.add_argument("--out", default=str(RESULT_JSON), help="(default: results/training_probe_scifact.json)")
    parser.add_argument("--test-once", action="store_true",
                        help="also score each kept model once on the TEST split over the whole corpus (run this only "
                             "for a recipe already chosen on dev)")
    return parser


def recipes_of(table: dict) -> dict[str, tuple[dict, bool]]:
    """The config file's recipes as name -> (TrainingArgs options, train on teacher-mined negatives?)."""
    return {name: ({k: v for k, v in recipe.items() if k != "teacher_negatives"}, recipe["teacher_negatives"])
            for name, recipe in table.items()}


def main() -> None:
    args, config_path, settings = parse_args(build_parser(), "training_probe")
    torch.set_num_threads(args.threads)
    cache = Path(args.cache_dir)
    data_dir = bundled_dataset_dir("scifact")
    train_data = load_beir(data_dir, "train")
    documents = list(train_data.corpus.values())
    backbone = Backbone.from_pretrained(None)
    config = EncoderConfig(dim=args.dim, wta_k=args.wta_k, query_k=None, bucket_layers=(-1,),
                           document_max_length=args.document_max_length)
    base = UHDEncoder(backbone, config)
    last = base.layers[0]
    start = time.perf_counter()
    doc_states = cached_states(backbone, [d.full_text for d in documents], last, args.document_max_length,
                               cache / "scifact-docs")
    base.center_buckets(doc_states)

    queries = list(train_data.queries)
    random.Random(args.seed).shuffle(queries)
    n_dev = int(len(queries) * args.dev_fraction)
    dev_queries, train_queries = queries[:n_dev], queries[n_dev:]
    dev_qrels = {q.query_id: train_data.qrels[q.query_id] for q in dev_queries if q.query_id in train_data.qrels}
    rows = {d.doc_id: i for i, d in enumerate(documents)}
    pairs = (pairs_from_qrels(train_queries, train_data.qrels, rows)
             + ict_pairs(documents, per_document=args.ict_per_document))
    unique_queries = sorted({p.query for p in pairs})
    query_states = cached_states(backbone, unique_queries, last, config.query_max_length, cache / "scifact-queries")
    seconds_states = time.perf_counter() - start

    # Dense teacher: the backbone as shipped (mean pooling, cosine), from the same cached states.
    query_vectors = dict(zip(unique_queries, mean_pool(query_states, last)))
    teacher = CachedTeacher(DenseTeacher(query_vectors, mean_pool(doc_states, last)))
    ranked = rank_with_teacher(teacher, unique_queries, documents, depth=args.teacher_depth, cache_dir=cache,
                               show_progress=False)
    teacher.remember(ranked)
    negatives = teacher_negatives(pairs, ranked, depth=args.teacher_depth, skip=args.negatives_skip)
    score = dev_evaluator(doc_states, documents, dev_queries, dev_qrels, args.dev_documents, args.seed)

    common = dict(epochs=args.epochs, max_steps=args.max_steps, max_minutes=args.max_minutes,
                  eval_every=args.eval_every)
    recipes = recipes_of(args.recipes)
    rows_out = []
    untrained = score(base, both=True)
    rows_out.append({"recipe": "untrained centred head", "steps": 0, "best_step": 0, "dev_binary_final": untrained[0],
                     "dev_weighted_final": untrained[1], "dev_binary_best": untrained[0],
                     "active_dims_per_document": untrained[2], "train_seconds": 0.0})
    test_data = load_beir(data_dir, "test") if args.test_once else None
    if test_data is not None:
        rows_out[-1].update(test_scores(base, doc_states, documents, test_data))
    for name, (options, hard) in recipes.items():
        if args.only and name not in args.only:
            continue
        model = copy.deepcopy(base)
        final: dict = {}

        def eval_fn(m, _final=final):  # the last call is the final state (before the best is restored)
            _final["binary"] = score(m)
            return _final["binary"]

        result = train(model, documents, pairs, TrainingArgs(**common, **options), document_states=doc_states,
                       query_states=query_states, hard_negatives=negatives if hard else None,
                       teacher=teacher if options.get("loss") == "kl" else None, eval_fn=eval_fn)
        kept = score(model, both=True)  # early stopping kept the best dev state (step 0 competes)
        rows_out.append({"recipe": name, "steps": result.steps, "best_step": result.best_step,
                         "dev_binary_final": result.evals[-1][1], "dev_binary_best": kept[0],
                         "dev_weighted_final": None, "dev_weighted_best": kept[1],
                         "active_dims_per_document": kept[2], "train_seconds": round(result.seconds, 1),
                         "dev_curve": result.evals, "loss_first_last": [float(np.mean(result.losses[:10])),
                                                                         float(np.mean(result.losses[-10:]))],
                         "options": options, "teacher_negatives": hard})
        if test_data is not None:
            rows_out[-1].update(test_scores(model, doc_states, documents, test_data))
        print(f"{name}: {rows_out[-1]}", file=sys.stderr, flush=True)

    print(f"\nSciFact dev ({len(dev_queries)} held-out TRAIN queries, positives + sampled docs = {args.dev_documents:,}), "
          f"{len(pairs)} pairs, states {seconds_states:.0f} s")
    print(f"{'recipe':46s} {'steps':>5s} {'best':>5s} {'bin final':>9s} {'bin kept':>9s} {'wtd kept':>9s} {'act/doc':>8s}")
    for r in rows_out:
        print(f"{r['recipe']:46s} {r['steps']:5d} {r['best_step']!s:>5s} {r['dev_binary_final']:9.4f} "
              f"{r['dev_binary_best']:9.4f} {r.get('dev_weighted_best', r['dev_weighted_final']):9.4f} "
              f"{r['active_dims_per_document']:8.0f}")
    if test_data is not None:
        print("test nDCG@10 (binary / weighted): " + "; ".join(
            f"{r['recipe']} {r['test_binary']:.4f} / {r['test_weighted']:.4f}" for r in rows_out))
    write_json(args.out, {"dataset": "scifact", "split": "dev = 10% of train queries (seed 0)",
                          "n_dev_queries": len(dev_queries), "n_pairs": len(pairs),
                          "config": {"dim": args.dim, "wta_k": args.wta_k, "backbone": "all-MiniLM-L6-v2 (frozen)",
                                     "centred": True, **common},
                          **record(config_path, settings),
                          "rows": rows_out})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
