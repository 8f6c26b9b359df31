"""Ablations behind the quickstart recipe: untrained vs trained head, loss, bucket layers, dim, wta_k, query_k.

One backbone pass over the corpus (frozen backbone) is cached to --cache and shared by every variant.
Prints a table and writes benchmarks/results/ablations_<dataset>.json.

    .venv/bin/python benchmarks/ablations.py                       # all variants on bundled SciFact
    .venv/bin/python benchmarks/ablations.py --only untrained-l6,trained-l6
"""
from __future__ import annotations

import argparse
import copy
import json
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import TokenStates, compute_token_states
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.inverted import WeightedIndex
from uhdsearch.quickstart import Recipe, _load_train_split, train_on_collection
from uhdsearch.search.searcher import Searcher

BASE = Recipe()
VARIANTS: dict[str, tuple[Recipe, bool]] = {  # name -> (recipe, train?)
    "untrained-l6": (BASE, False),
    "trained-l6": (BASE, True),
    "trained-l6-distill": (replace(BASE, distill_weight=1.0), True),
    "trained-l6-qrels-only": (replace(BASE, ict_per_document=0), True),
    "trained-l6-ict-only": (replace(BASE, use_train_qrels=False), True),
    "trained-l6-lr1e-3": (replace(BASE, learning_rate=1e-3), True),
    "trained-l6-lr1e-5": (replace(BASE, learning_rate=1e-5, eval_every=50), True),
    "trained-l6-lr5e-6": (replace(BASE, learning_rate=5e-6, eval_every=50), True),  # the paper's rate (A.1)
    "trained-l6-long": (replace(BASE, epochs=3.0, learning_rate=3e-4, max_train_minutes=25.0, eval_every=200), True),
    "untrained-l2-4-6": (replace(BASE, dim=16_384, bucket_layers=(2, 4, 6)), False),
    "trained-l2-4-6": (replace(BASE, dim=16_384, bucket_layers=(2, 4, 6)), True),
    "untrained-l6-dim8k": (replace(BASE, dim=8_192), False),
    "untrained-l6-wta40": (replace(BASE, wta_k=40), False),
    "untrained-l6-dim64k": (replace(BASE, dim=65_536), False),
    "untrained-l6-dim80k": (replace(BASE, dim=81_920), False),  # the paper's n
    # top two backbone layers trained too, at a BERT fine-tuning rate; documents are re-encoded afterwards
    "trained-l6-unfrozen2": (replace(BASE, train_backbone_layers=2, learning_rate=2e-5, max_train_minutes=10.0,
                                     eval_every=50), True),
}
QUERY_KS = (100, 400, None)  # None: every active query dimension
MEASURES = ["nDCG@10", "RR@10", "R@100"]


def load_states(backbone, texts, max_length, cache: Path) -> TokenStates:
    layers = list(range(backbone.n_layers + 1))
    if cache.is_file():
        with safe_open(str(cache), "pt") as f:
            return TokenStates(layers, [f.get_tensor(f"l{x}") for x in layers], f.get_tensor("offsets").numpy(),
                               f.get_tensor("spans").numpy())
    states = compute_token_states(backbone, texts, layers, max_length, desc="backbone (cached once)")
    cache.parent.mkdir(parents=True, exist_ok=True)
    tensors = {f"l{x}": s for x, s in zip(layers, states.states)}
    tensors |= {"offsets": torch.from_numpy(states.offsets), "spans": torch.from_numpy(states.char_spans)}
    save_file(tensors, str(cache))
    return states


def run_variant(name, recipe, trained, backbone, states, data, train_data):
    config = EncoderConfig(dim=recipe.dim, wta_k=recipe.wta_k, query_k=recipe.query_k,
                           bucket_layers=recipe.bucket_layers, document_max_length=recipe.document_max_length)
    # a variant that trains backbone layers gets its own copy, so later variants keep the frozen one
    model = UHDEncoder(copy.deepcopy(backbone) if recipe.train_backbone_layers else backbone, config)
    documents = list(data.corpus.values())
    seconds, dev = 0.0, {}
    if trained:
        result, _ = train_on_collection(model, documents, train_data, recipe, states=states)
        seconds = result.seconds
        dev = {"steps": result.steps, "dev_nDCG@10": [[s, round(v, 4)] for s, v in result.evals],
               "best_dev_step": result.best_step}
    elif recipe.center:
        model.center_buckets(states)
    model.eval()
    if recipe.train_backbone_layers and dev.get("best_dev_step") != 0:  # cached states: the untrained backbone
        encoded = model.encode_document([d.full_text for d in documents])
    else:
        encoded = model.encode_states(states)
    index = WeightedIndex.from_encoding(encoded, list(data.corpus), None)
    rows = []
    for query_k, selection in [(k, "value") for k in QUERY_KS] + [(400, "value-idf")]:
        for scoring in ("binary", "weighted"):
            searcher = Searcher(model, index, scoring, query_k=query_k, query_selection=selection)
            scores = evaluate(searcher.search(data.queries, k=1000), data.qrels, MEASURES)
            rows.append({"variant": name, "scoring": scoring, "query_k": query_k, "selection": selection, **scores,
                         "train_seconds": round(seconds), "active_per_doc": float(encoded.active_per_row().sum(1).mean()),
                         **dev})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None, help="BEIR directory (default: bundled SciFact)")
    parser.add_argument("--only", default=None, help="comma-separated variant names; default all: " + ", ".join(VARIANTS))
    parser.add_argument("--cache", type=Path, default=Path("out/ablations/states.safetensors"))
    args = parser.parse_args()
    data_dir = args.data or bundled_dataset_dir("scifact")
    data = load_beir(data_dir, "test")
    train_data = _load_train_split(data_dir, "train")
    backbone = Backbone.from_pretrained(None)
    states = load_states(backbone, [d.full_text for d in data.corpus.values()], BASE.document_max_length, args.cache)
    names = args.only.split(",") if args.only else list(VARIANTS)
    rows = []
    start = time.time()
    for name in names:
        recipe, trained = VARIANTS[name]
        rows += run_variant(name, recipe, trained, backbone, states, data, train_data)
    print(f"\n{'variant':24s} {'scoring':9s} {'query_k':>7s} {'selection':10s} " + " ".join(f"{m:>8s}" for m in MEASURES))
    for r in rows:
        print(f"{r['variant']:24s} {r['scoring']:9s} {str(r['query_k']):>7s} {r['selection']:10s} "
              + " ".join(f"{r[m]:8.4f}" for m in MEASURES))
    out = Path(__file__).parent / "results" / f"ablations_{data.name}.json"
    previous = json.loads(out.read_text())["rows"] if out.is_file() else []
    rows = [r for r in previous if r["variant"] not in set(names)] + rows  # runs of other variants are kept
    out.write_text(json.dumps({"dataset": data.name, "split": "test", "rows": rows,
                               "minutes_last_run": round((time.time() - start) / 60, 1)}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
