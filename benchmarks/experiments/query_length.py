"""Choose a trained model's query token limit on dev, then (with --test-once) score the choice on test once.

Chose each collection's query token limit on its dev split (benchmarks/results/query_length_<collection>.json, as
studies/training.py's QUERY_LENGTHS uses them).

The paper cuts queries at 32 tokens (A.1, MS MARCO's short questions); CISI and Medline queries are paragraphs.
Dev is the training recipe's own: the held-out train queries where the collection has train qrels, else the
held-out corpus (ICT) queries judged by the teacher (training/recipe.py), so no test query picks the limit.

    .venv/bin/python -m benchmarks.experiments.query_length --data ../shared/data/cisi --model out/cisi/model --test-once
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.lib.settings import RESULTS, comma_list, parse_args, record
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import compute_token_states
from uhdsearch.evaluation.datasets import load_beir, load_corpus
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.io import write_json
from uhdsearch.search.searcher import Searcher
from uhdsearch.recipes.recipe import (Recipe, build_teacher, dev_evaluator, load_train_split, teacher_judged,
                                       training_pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--lengths", type=comma_list(int))
    parser.add_argument("--teacher")
    parser.add_argument("--test-once", action="store_true", help="score the chosen limit on the test split")
    parser.add_argument("--out", type=Path)
    args, config_path, settings = parse_args(parser, "query_length")
    model = UHDEncoder.from_pretrained(args.model)
    train_data = load_train_split(args.data, "train")
    documents = list((train_data.corpus if train_data else load_corpus(args.data / "corpus.jsonl")).values())
    layers = sorted(set(model.layers) | {model.backbone.n_layers})
    states = compute_token_states(model.backbone, [d.full_text for d in documents], layers,
                                  model.config.document_max_length)
    recipe = Recipe(teacher=args.teacher)
    _, dev = training_pairs(documents, train_data, recipe)
    if train_data is None:
        dev = teacher_judged(build_teacher(args.teacher, model.backbone, documents, states), documents, dev, recipe.judged_depth)
    score = dev_evaluator(states, documents, dev)
    rows = []
    for length in args.lengths:
        rows.append({"query_max_length": length,
                     "dev_binary": score(UHDEncoder.from_pretrained(args.model, query_max_length=length))})
        print(f"query_max_length {length:4d}: dev nDCG@10 {rows[-1]['dev_binary']:.4f}", file=sys.stderr, flush=True)
    chosen = max(rows, key=lambda r: (r["dev_binary"], -r["query_max_length"]))["query_max_length"]
    result = {"data": str(args.data), "model": str(args.model), "dev": "held-out train queries" if train_data
              else f"held-out corpus queries judged by the {args.teacher} teacher", "n_dev_queries": len(dev[0]),
              "rows": rows, "chosen": chosen,
              **record(config_path, settings)}
    if args.test_once:
        test = load_beir(args.data, "test")
        chosen_model = UHDEncoder.from_pretrained(args.model, query_max_length=chosen)
        encoded = chosen_model.encode_states(states, "document")
        ids = [d.doc_id for d in documents]
        for variant, klass in (("binary", BinaryIndex), ("weighted", WeightedIndex)):
            searcher = Searcher(chosen_model, klass.from_encoding(encoded, ids, None), variant, max_df=None, length_norm=None)
            run = searcher.search(test.queries, 1000)
            result[f"test_{variant}"] = evaluate(run, test.qrels, ["nDCG@10", "RR@10", "R@100"])
    print(f"{'query_max_length':>16s} {'dev nDCG@10':>12s}")
    for r in rows:
        print(f"{r['query_max_length']:16d} {r['dev_binary']:12.4f}{'  <- chosen' if r['query_max_length'] == chosen else ''}")
    for variant in ("binary", "weighted"):
        if f"test_{variant}" in result:
            print(f"test, chosen limit, {variant}: " + "  ".join(f"{m} {v:.4f}" for m, v in result[f'test_{variant}'].items()))
    out = args.out or RESULTS / f"query_length_{args.data.name}.json"
    write_json(out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
