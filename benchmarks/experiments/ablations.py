"""Ablations behind the quickstart recipe: untrained vs trained head, loss, bucket layers, dim, wta_k, query_k.

Chose the quickstart recipe's head (training/recipe.py `Recipe`): trained and centred, one bucket on the last
layer, dim 32,768, wta_k 40, no query truncation (query_k None).

The variants are read from benchmarks/configs/ablations.toml (--config); the results JSON names the file.
One backbone pass over the corpus (frozen backbone) is cached to --cache and shared by every variant.
Prints a table and writes benchmarks/results/ablations_<dataset>.json.

    .venv/bin/python -m benchmarks.experiments.ablations                       # all variants on bundled SciFact
    .venv/bin/python -m benchmarks.experiments.ablations --only untrained-l6,trained-l6
"""
from __future__ import annotations

import argparse
import copy
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from benchmarks.lib.settings import RESULTS, default_config, read_config, record, relative
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import TokenStates, compute_token_states
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.inverted import WeightedIndex
from uhdsearch.search.searcher import Searcher
from uhdsearch.recipes.presets import preset
from uhdsearch.recipes.recipe import Recipe, load_train_split, train_on_collection

CONFIG = default_config("ablations")


@dataclass(frozen=True)
class Ablations:
    """A config file's base preset, variants (name -> (recipe, train?)), search-time query_k values, measures."""

    base: Recipe
    variants: dict[str, tuple[Recipe, bool]]
    query_ks: tuple[int | None, ...]
    measures: list[str]


def load_config(path: Path) -> Ablations:
    """Read an ablations TOML file (see configs/ablations.toml)."""
    raw = read_config(path)
    variants = {}
    for name, settings in raw["variants"].items():
        settings = dict(settings)
        trained = settings.pop("train")
        variants[name] = (preset(raw["preset"], **settings), trained)
    query_ks = tuple(None if k == "all" else int(k) for k in raw["query_ks"])
    return Ablations(preset(raw["preset"]), variants, query_ks, list(raw["measures"]))


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


def run_variant(name, recipe, trained, backbone, states, data, train_data, query_ks, measures):
    # a variant that trains backbone layers gets its own copy, so later variants keep the frozen one
    unfrozen = recipe.training.train_backbone_layers
    model = UHDEncoder(copy.deepcopy(backbone) if unfrozen else backbone, recipe.encoder)
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
    if unfrozen and dev.get("best_dev_step") != 0:  # cached states: the untrained backbone
        encoded = model.encode_document([d.full_text for d in documents])
    else:
        encoded = model.encode_states(states)
    index = WeightedIndex.from_encoding(encoded, list(data.corpus), None)
    rows = []
    for query_k, selection in [(k, "value") for k in query_ks] + [(400, "value-idf")]:
        for scoring in ("binary", "weighted"):
            # None ("all") keeps every active query dim: query_k=dim, since Searcher's None means the model's own
            searcher = Searcher(model, index, scoring, query_k=query_k or model.config.dim, query_selection=selection,
                                max_df=None, length_norm=None)
            scores = evaluate(searcher.search(data.queries, k=1000), data.qrels, measures)
            rows.append({"variant": name, "scoring": scoring, "query_k": query_k, "selection": selection, **scores,
                         "train_seconds": round(seconds), "active_per_doc": float(encoded.active_per_row().sum(1).mean()),
                         **dev})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None, help="BEIR directory (default: bundled SciFact)")
    parser.add_argument("--config", type=Path, default=CONFIG, help="variants TOML (default: configs/ablations.toml)")
    parser.add_argument("--only", default=None, help="comma-separated variant names (default: all of --config)")
    parser.add_argument("--cache", type=Path, default=Path("out/ablations/states.safetensors"))
    args = parser.parse_args()
    config = load_config(args.config)
    data_dir = args.data or bundled_dataset_dir("scifact")
    data = load_beir(data_dir, "test")
    train_data = load_train_split(data_dir, "train")
    backbone = Backbone.from_pretrained(None)
    texts = [d.full_text for d in data.corpus.values()]
    states = load_states(backbone, texts, config.base.encoder.document_max_length, args.cache)
    names = args.only.split(",") if args.only else list(config.variants)
    unknown = set(names) - set(config.variants)
    if unknown:
        parser.error(f"unknown variant(s) {sorted(unknown)} in {args.config}")
    rows = []
    start = time.time()
    for name in names:
        recipe, trained = config.variants[name]
        rows += run_variant(name, recipe, trained, backbone, states, data, train_data, config.query_ks,
                            config.measures)
    print(f"\n{'variant':24s} {'scoring':9s} {'query_k':>7s} {'selection':10s} "
          + " ".join(f"{m:>8s}" for m in config.measures))
    for r in rows:
        print(f"{r['variant']:24s} {r['scoring']:9s} {str(r['query_k']):>7s} {r['selection']:10s} "
              + " ".join(f"{r[m]:8.4f}" for m in config.measures))
    out = RESULTS / f"ablations_{data.name}.json"
    previous = json.loads(out.read_text())["rows"] if out.is_file() else []
    rows = [r for r in previous if r["variant"] not in set(names)] + rows  # runs of other variants are kept
    out.write_text(json.dumps({"dataset": data.name, "split": "test", "config": relative(args.config), "rows": rows,
                               "minutes_last_run": round((time.time() - start) / 60, 1),
                               **record(args.config, {key: str(value) if isinstance(value, Path) else value
                                                      for key, value in vars(args).items()})}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
