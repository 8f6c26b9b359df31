"""The compact preset against the quickstart, after each reported its one SciFact test run (issue 33).

Two questions, neither of which chooses anything:
- Is the test gap between the two runs' UHD-binary scores more than noise? A paired t-test over the 300 test
  queries, on the runs the two quickstarts wrote (their figures are already reported; nothing is re-scored).
- Do the search defaults (stop dimensions, length normalization), chosen for the 32,768-dim head, fit a head half
  the size? A grid of both settings, for both models, on SciFact's DEV split (the recipe's held-out train
  queries) over the whole corpus. Test queries are not searched here.

    .venv/bin/python -m benchmarks.experiments.compact_check      # ~3 min on 2 cores

Writes benchmarks/results/compact_check.json.
"""
from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

from benchmarks.lib.settings import RESULTS, comma_list, parse_args, record
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
from uhdsearch.evaluation.experiment import paired_ttest
from uhdsearch.evaluation.metrics import evaluate, per_query
from uhdsearch.index import open_index
from uhdsearch.io import write_json
from uhdsearch.recipes.recipe import Recipe, load_train_split, training_pairs
from uhdsearch.search.searcher import Searcher
from uhdsearch.types import load_run

RESULT_JSON = RESULTS / "compact_check.json"
RUN = "runs/uhd-binary-norm.trec"  # the quickstart's UHD-binary run, searched with the defaults


def paired_test(compact: Path, quickstart: Path, qrels) -> dict:
    """Per-query nDCG@10 of the two runs, compared pairwise (two-sided t-test)."""
    a, b = (per_query(load_run(root / RUN), qrels, ["nDCG@10"])["nDCG@10"] for root in (compact, quickstart))
    x, y = np.array([a[q] for q in a]), np.array([b[q] for q in a])
    return {"queries": len(x), "compact": round(float(x.mean()), 4), "quickstart": round(float(y.mean()), 4),
            "difference": round(float((x - y).mean()), 4), "p": round(paired_ttest(a, b), 3),
            "compact_better": int((x > y).sum()), "quickstart_better": int((x < y).sum())}


def dev_grid(root: Path, queries, qrels, max_dfs, alphas) -> list[dict]:
    """Dev nDCG@10 of the model in `root` over its whole binary index, per stop-dimension and length setting."""
    model, index = UHDEncoder.from_pretrained(root / "model"), open_index(root / "index-binary")
    rows = []
    for max_df, alpha in itertools.product(max_dfs, alphas):
        searcher = Searcher(model, index, "binary", max_df=None if max_df >= 1.0 else max_df,
                            length_norm=alpha or None)
        score = evaluate(searcher.search(queries, k=100), qrels, ["nDCG@10"])["nDCG@10"]
        rows.append({"max_df": max_df, "length_norm": alpha, "dev nDCG@10": round(score, 4)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compact", help="a `uhdsearch quickstart --preset compact` output directory")
    parser.add_argument("--quickstart", help="a `uhdsearch quickstart` output directory")
    parser.add_argument("--max-df", type=comma_list(float))
    parser.add_argument("--length-norm", type=comma_list(float))
    parser.add_argument("--out", default=str(RESULT_JSON))
    args, config, settings = parse_args(parser, "compact_check", argv)
    compact, quickstart = Path(args.compact), Path(args.quickstart)
    data_dir = bundled_dataset_dir("scifact")
    test = load_beir(data_dir, "test")
    documents = list(test.corpus.values())
    _, (queries, qrels) = training_pairs(documents, load_train_split(data_dir, "train"), Recipe())
    write_json(args.out, {
        "test_paired": paired_test(compact, quickstart, test.qrels),
        "dev_queries": len(queries),
        "dev_grid": {name: dev_grid(root, queries, qrels, args.max_df, args.length_norm)
                     for name, root in (("compact", compact), ("quickstart", quickstart))},
        **record(config, settings)})


if __name__ == "__main__":
    main()
