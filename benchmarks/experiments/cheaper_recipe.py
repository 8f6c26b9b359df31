"""Cheaper variants of the quickstart recipe, scored on SciFact's DEV split only (issue 33).

Held to AVX2 (no bfloat16 hardware) the quickstart spends most of its time in the WTA head's product over
document tokens: training's batches, the dev checks and the index. This trains each variant of
benchmarks/configs/cheaper_recipe.toml the quickstart's way (recipes/recipe.py `train_on_collection`: the same
pairs, dev split, early stopping and head/query-length choice) on one shared backbone pass, and records per
variant its dev checks, the kept step, the dev score of the choice and its training seconds on this CPU.
Test queries are never read: a variant is chosen here, and its test figure comes once from the quickstart.

    .venv/bin/python -m benchmarks.experiments.cheaper_recipe       # ~25 min on 2 cores with bfloat16 hardware

Writes benchmarks/results/cheaper_recipe.json.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

from benchmarks.lib.settings import RESULTS, parse_args, record
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import compute_token_states
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
from uhdsearch.io import read_json, write_json
from uhdsearch.recipes.presets import preset
from uhdsearch.recipes.recipe import load_train_split, train_on_collection

RESULT_JSON = RESULTS / "cheaper_recipe.json"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--only", help="run the one variant of this name")
    parser.add_argument("--out", default=str(RESULT_JSON))
    args, config, settings = parse_args(parser, "cheaper_recipe", argv)
    if args.only and args.only not in args.variants:
        parser.error(f"--only {args.only!r}: no such variant in {config}; choose one of {', '.join(args.variants)}")
    torch.set_num_threads(args.threads)
    data_dir = bundled_dataset_dir("scifact")
    train_data = load_train_split(data_dir, "train")  # train queries and qrels: the dev split is cut from them
    documents = list(load_beir(data_dir, "train").corpus.values())
    base = preset("quickstart")
    bb = Backbone.from_pretrained(None)
    start = time.perf_counter()
    states = compute_token_states(bb, [d.full_text for d in documents], [bb.n_layers],
                                  base.encoder.document_max_length, desc="backbone documents")
    log(f"backbone over {len(documents)} documents: {time.perf_counter() - start:.0f} s")
    # --only replaces its variant's row and keeps the others; each row records the run, commit and CPU it came from
    kept = read_json(args.out)["variants"] if args.only and Path(args.out).is_file() else []
    rows = {r["variant"]: r for r in kept if r["variant"] in args.variants}
    for name, fields in args.variants.items():
        if args.only and name != args.only:
            continue
        recipe = dataclasses.replace(base, **fields)
        model = UHDEncoder(bb, recipe.encoder)
        log(f"== {name}")
        start = time.perf_counter()
        trained, n_pairs = train_on_collection(model, documents, train_data, recipe, states)
        made = record(config, settings)
        rows[name] = {"variant": name, "fields": fields, "steps": trained.steps,
                      "train_seconds": round(time.perf_counter() - start, 1), "dev_evals": trained.evals,
                      "best_step": trained.best_step, "best_dev": trained.best_score,
                      "selection": {k: v for k, v in trained.selection.items() if k != "tried"},
                      "training_pairs": n_pairs, **{k: made[k] for k in ("command", "git_commit", "machine")}}
        log(f"   kept step {trained.best_step}, dev {trained.best_score:.4f}, {rows[name]['train_seconds']} s")
        write_json(args.out, {"variants": [rows[n] for n in args.variants if n in rows], **made})


if __name__ == "__main__":
    main()
