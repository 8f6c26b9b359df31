"""The training study (issue 16 item 8): each training recipe on each collection, scored as deployed.

For every collection and every named recipe a fresh head (same seed, so the same untrained start) is centred and
trained by recipes/recipe.py, with dev early stopping in which step 0 competes; the kept head is then scored
ONCE on the test split, binary and weighted, beside the untrained head. Nothing is chosen on test: the study
reports every recipe, and names the one its dev split would pick. Queries are cut at a fixed token limit per
collection (chosen earlier on each dev split, benchmarks/results/query_length_*.json), so recipes compare on one
footing; the quickstart's own head/length choice is not applied here.

Each (collection, recipe) row is cached under the cache folder, keyed by its settings, so an interrupted run
resumes at the next recipe. Writes result.json, dev curves (change against step 0) and a bar chart per collection.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from uhdsearch.errors import UsageError
from uhdsearch.studies.registry import Study, register

logger = logging.getLogger(__name__)

# Corpus queries' positives: the source passage and sum-of-max's top 3; a negative from its ranks 10-30.
_MINED = {"teacher": "sum-of-max", "mined_positives": 3, "teacher_negative_depth": 30, "negative_skip": 10,
          "epochs": 1.0}
# Overrides of the quickstart preset (recipes/presets.py); each label is a row of the study.
RECIPES: dict[str, dict[str, Any]] = {
    # the paper's Eq. 8 on float scores at the learning rate a head needs (README "Ablations")
    "hinge (Eq. 8), float scores": {"loss": "hinge", "binary_aware": False, "learning_rate": 1e-4},
    "InfoNCE, float scores": {"loss": "infonce", "binary_aware": False},
    "InfoNCE through the binarized buckets (quickstart)": {},
    "same + FLOPS density penalty 1e-3": {"density_weight": 1e-3, "density": "flops"},
    "same + df penalty 1e-2 (tau 0.1)": {"density_weight": 1e-2, "density": "df", "tau": 0.1},
    "KL from dense, binarized": {"loss": "kl", "teacher": "dense"},
    "KL from sum-of-max, binarized": {"loss": "kl", "teacher": "sum-of-max"},
    # issue 16 items 1-2 (recipes/mining.py). Mined positives triple the pairs: one epoch keeps the step count.
    "InfoNCE binarized, sum-of-max-mined positives (top 3) and negatives": {**_MINED},
    "KL from sum-of-max over mined positives and negatives": {**_MINED, "loss": "kl"},
    "InfoNCE binarized, mined positives, ANCE negatives re-mined every 30 steps": {
        **_MINED, "teacher_negative_depth": 0, "remine_every": 30},
    # the two together (session 15): KL from the teacher over the mined positives, negatives re-mined by the model
    "KL from sum-of-max over mined positives, ANCE negatives re-mined every 30 steps": {
        **_MINED, "loss": "kl", "teacher_negative_depth": 0, "remine_every": 30},
    # ANCE alone on the quickstart's pairs; 40 steps (the study's time on a loaded machine), re-mined at 0 and 20
    "InfoNCE binarized, ANCE negatives re-mined every 20 steps (40 steps)": {"remine_every": 20, "max_steps": 40},
    "mined positives and negatives + df penalty 1e-2 (tau 0.1)": {
        **_MINED, "density_weight": 1e-2, "density": "df", "tau": 0.1},
    # Transfer (training/transfer.py): the SciFact quickstart's trained head (run `uhdsearch quickstart` first) as
    # the start, then the quickstart recipe on this corpus; step 0 of the dev curve is the transferred head as is.
    "transfer: SciFact-trained head, re-centred here, then the quickstart recipe": {
        "init_head": "out/quickstart/model"},
    "transfer: SciFact-trained head, its biases kept, then the quickstart recipe": {
        "init_head": "out/quickstart/model", "center": False},
}
# Query token limits chosen on each collection's dev split (benchmarks/experiments/query_length.py); others: the
# preset's.
QUERY_LENGTHS = {"scifact": 32, "cisi": 64, "medline": 128}

DEFAULTS: dict[str, Any] = {
    "collections": [None],  # BEIR-layout directories; None: the bundled SciFact
    "recipes": RECIPES,
    "only": None,  # recipe labels to run: a list, or {collection name: list}; None: all
    "common": {},  # settings applied to every recipe and to the untrained head (e.g. a smaller dim)
    "max_steps": None,  # a cap on every recipe's steps (None: the preset's 450)
    "query_lengths": QUERY_LENGTHS,
    "backbone": None,  # a local backbone directory; None: all-MiniLM-L6-v2
    "seed": 0,  # of the heads' initialisation and the batch order: other seeds repeat a row to see its noise
}
MEASURES = ["nDCG@10", "RR@10"]
ROWS_VERSION = 1  # bump when a default or the way a row is trained or scored changes: cached rows are then redone


def run(out_dir: Path, cache_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    tables, figures, chosen = {}, {}, {}
    for data_dir in options["collections"]:
        name = Path(data_dir).name if data_dir else "scifact"
        rows = _collection_rows(data_dir, _selected(options, name), options, cache_dir)
        name = rows[0]["collection"]
        tables[f"{name}: test nDCG@10 / RR@10 of the kept head, binary and weighted"] = rows
        scored = [r for r in rows[1:] if r["dev_kept"] is not None]
        best = max(scored, key=lambda r: r["dev_kept"], default=None)  # the first of equal dev scores
        if best is not None and best["kept_step"] == 0:  # no recipe beat its own start on dev
            best = {**rows[0], "dev_kept": best["dev_kept"], "recipe": "the untrained head: every recipe kept step 0"}
        chosen[name] = {"recipe": best["recipe"], "dev_kept": best["dev_kept"], "kept_step": best["kept_step"],
                        "test_binary_nDCG@10": best["binary_nDCG@10"],
                        "change_vs_untrained": best["binary_vs_untrained"]} if best else None
        figures.update(_plots(out_dir, name, rows))
    return {"data": {"collections": [str(c) if c else "bundled scifact" for c in options["collections"]],
                     "split": "test", "dev": "recipe's held-out train queries, or teacher-judged corpus queries"},
            "chosen_on_dev": chosen, "tables": tables, "figures": figures}


def _selected(options: dict[str, Any], collection: str) -> dict[str, dict[str, Any]]:
    recipes = options["recipes"]
    if not isinstance(recipes, dict) or not all(isinstance(v, dict) for v in recipes.values()):
        raise UsageError("recipes: give a JSON object {label: {setting: value}} of quickstart-preset overrides")
    only = options["only"]
    if isinstance(only, dict):
        only = only.get(collection)
    if only is None:
        return dict(recipes)
    unknown = [label for label in only if label not in recipes]
    if unknown:
        raise UsageError(f"only: unknown recipe label(s) {unknown}; known: {list(recipes)}")
    return {label: recipes[label] for label in only}


def _collection_rows(data_dir, recipes, options, cache_dir: Path) -> list[dict[str, Any]]:
    """The untrained row, then one row per recipe (cached)."""
    from uhdsearch.encoder.backbone import Backbone
    from uhdsearch.encoder.states import compute_token_states
    from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
    from uhdsearch.recipes.recipe import load_train_split

    data_dir = Path(data_dir) if data_dir else bundled_dataset_dir("scifact")
    data = load_beir(data_dir, "test")
    train_data = load_train_split(data_dir, "train")
    documents = list(data.corpus.values())
    settings = {label: _recipe(overrides, data.name, options) for label, overrides in recipes.items()}
    keys = {label: _key(data_dir, recipe, options) for label, recipe in settings.items()}
    untrained_key = _key(data_dir, _recipe({}, data.name, options), options, "untrained")
    missing = [k for k in [untrained_key, *keys.values()] if not (cache_dir / f"{k}.json").is_file()]
    backbone = states = None  # one backbone pass, only when a row is not cached yet
    if missing:
        backbone = Backbone.from_pretrained(options["backbone"])
        layers = sorted({backbone.n_layers} | {backbone.resolve_layer(lay) for r in settings.values()
                                               for lay in r.encoder.bucket_layers})
        lengths = {r.encoder.document_max_length for r in settings.values()} | {
            _recipe({}, data.name, options).encoder.document_max_length}
        if len(lengths) > 1:
            raise UsageError(f"recipes: every recipe must cut documents at one length (got {sorted(lengths)})")
        states = compute_token_states(backbone, [d.full_text for d in documents], layers, lengths.pop(),
                                      desc=f"backbone ({data.name})")
    rows = [_cached(cache_dir, untrained_key, lambda: _untrained_row(
        backbone, _recipe({}, data.name, options), documents, data, states))]
    for label in tqdm(settings, desc=f"recipes ({data.name})", unit="recipe"):
        rows.append(_cached(cache_dir, keys[label], lambda label=label: _trained_row(
            backbone, settings[label], documents, train_data, data, states)))
        rows[-1].update(recipe=label, settings=recipes[label])
    rows[0].update(recipe="untrained centred head (step 0)", settings={})
    for row in rows:
        row["collection"] = data.name
        for kind in ("binary", "weighted"):
            row[f"{kind}_vs_untrained"] = round(row[f"{kind}_nDCG@10"] - rows[0][f"{kind}_nDCG@10"], 4)
    return rows


def _recipe(overrides: dict[str, Any], collection: str, options: dict[str, Any]):
    from uhdsearch.recipes.presets import preset

    if not isinstance(options["common"], dict):
        raise UsageError("common: give a JSON object {setting: value}")
    changes = {**options["common"], **overrides}
    if options["max_steps"] is not None:
        changes["max_steps"] = int(options["max_steps"])
    length = options["query_lengths"].get(collection)
    if length is not None:
        changes["query_max_length"] = int(length)
    changes.setdefault("max_minutes", 60.0)  # the step cap decides, not the machine's load
    # The README's study tables chose on plain counts; common={"dev_length_norm": 0.3} is the quickstart's choice.
    changes.setdefault("dev_length_norm", 0.0)
    try:
        recipe = preset("quickstart", query_lengths=(), **changes)
    except TypeError as exc:
        raise UsageError(f"recipes: {exc}") from exc
    seed = int(options.get("seed") or 0)
    if seed:
        recipe = dataclasses.replace(recipe, encoder=recipe.encoder.replace(seed=seed),
                                     training=dataclasses.replace(recipe.training, seed=seed))
    if recipe.training.train_backbone_layers != 0:  # every row shares one backbone and its cached states
        raise UsageError("recipes: the training study trains heads on a frozen backbone; train_backbone_layers "
                         "must be 0 (benchmarks/experiments/backbone_training.py measures backbone training)")
    return recipe


def _key(data_dir: Path, recipe, options: dict[str, Any], extra: str = "") -> str:
    """The cache key: the collection, the backbone, ROWS_VERSION and the settings that differ from the dataclasses'
    defaults, so a setting added later at a default that keeps the old behaviour leaves cached rows valid. Changing
    a default, or how a row is trained or scored, must bump ROWS_VERSION."""
    if recipe.init_head:  # a path names a model that may be retrained in place: key on its weights too
        from uhdsearch.encoder.model import UHDEncoder

        extra = f"{extra}|init_head {UHDEncoder.from_pretrained(recipe.init_head).digest()}"
    blob = json.dumps([str(Path(data_dir).resolve()), _changed_settings(recipe), options["backbone"], extra]
                      + ([ROWS_VERSION] if ROWS_VERSION > 1 else []), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _changed_settings(recipe) -> dict[str, Any]:
    from uhdsearch.encoder.config import EncoderConfig
    from uhdsearch.recipes.recipe import Recipe
    from uhdsearch.training.trainer import TrainingArgs

    # dev_length_norm's default before session 15, so the rows cached before it keep their keys
    defaults = Recipe(encoder=EncoderConfig(), training=TrainingArgs(), dev_length_norm=0.0).flat_json()
    return {k: v for k, v in recipe.flat_json().items() if k not in defaults or defaults[k] != v}


def _cached(cache_dir: Path, key: str, compute) -> dict[str, Any]:
    from uhdsearch.io import read_json, write_json

    path = cache_dir / f"{key}.json"
    if path.is_file():
        return read_json(path)
    row = compute()
    write_json(path, row)
    return row


def _untrained_row(backbone, recipe, documents, data, states) -> dict[str, Any]:
    from uhdsearch.encoder.model import UHDEncoder

    model = UHDEncoder(backbone, recipe.encoder)
    model.center_buckets(states)
    return {"kept_step": 0, "steps": 0, "seconds": 0.0, "dev_start": None, "dev_kept": None, "evals": [],
            **_test_scores(model, documents, data, states)}


def _trained_row(backbone, recipe, documents, train_data, data, states) -> dict[str, Any]:
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.recipes.recipe import train_on_collection

    model = UHDEncoder(backbone, recipe.encoder)
    start = time.perf_counter()
    result, n_pairs = train_on_collection(model, documents, train_data, recipe, states)
    seconds = time.perf_counter() - start
    evals = [[int(s), round(float(v), 4)] for s, v in result.evals]
    return {"kept_step": result.best_step, "steps": result.steps, "seconds": round(seconds, 1), "pairs": n_pairs,
            **({"remined_at": result.remined_at} if result.remined_at else {}),
            "dev_start": evals[0][1] if evals else None, "evals": evals,
            "dev_kept": None if result.best_score is None else round(float(result.best_score), 4),
            "loss_first_last": [float(np.mean(result.losses[:20])), float(np.mean(result.losses[-20:]))]
            if result.losses else None, **_test_scores(model, documents, data, states)}


def _test_scores(model, documents, data, states) -> dict[str, Any]:
    """The test split scored once over the whole corpus, binary and weighted, and the density it costs; binary also
    as search scores it by default (length-normalized, `binary_norm_*`)."""
    from uhdsearch.evaluation.metrics import evaluate
    from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
    from uhdsearch.search.searcher import Searcher

    encoded = model.encode_states(states, "document", show_progress=False)
    doc_ids = [d.doc_id for d in documents]
    row: dict[str, Any] = {"active_dims_per_document": round(float(encoded.active_per_row().sum(axis=1).mean()), 1)}
    for kind, cls in (("binary", BinaryIndex), ("weighted", WeightedIndex)):
        index = cls.from_encoding(encoded, doc_ids, None)
        searcher = Searcher(model, index, kind, max_df=None, length_norm=None)  # the model's own score
        scores = evaluate(searcher.search(data.queries, k=100), data.qrels, MEASURES)
        row.update({f"{kind}_{m}": round(v, 4) for m, v in scores.items()})
        if kind == "binary":
            normalized = Searcher(model, index, kind, max_df=None, length_norm="auto")
            scores = evaluate(normalized.search(data.queries, k=100), data.qrels, MEASURES)
            row.update({f"binary_norm_{m}": round(v, 4) for m, v in scores.items()})
    return row


def _plots(out_dir: Path, name: str, rows: list[dict[str, Any]]) -> dict[str, str]:
    from uhdsearch.studies.plotting import save, subplots

    fig, (curves, bars) = subplots(2, width=6.0)
    for row in rows[1:]:
        if row["evals"]:
            steps, scores = zip(*row["evals"])
            curves.plot(steps, np.array(scores) - scores[0], marker=".", label=row["recipe"][:40])
    curves.axhline(0.0, color="grey", lw=0.8)
    curves.set(xlabel="training step", ylabel="dev nDCG@10 minus step 0", title=f"{name}: dev curves")
    curves.legend(fontsize=6)
    labels = [r["recipe"][:28] for r in rows]
    y = np.arange(len(rows))
    bars.barh(y - 0.2, [r["binary_nDCG@10"] for r in rows], height=0.4, label="binary")
    bars.barh(y + 0.2, [r["weighted_nDCG@10"] for r in rows], height=0.4, label="weighted")
    bars.axvline(rows[0]["binary_nDCG@10"], color="grey", ls="--", lw=0.8)
    bars.set_yticks(y, labels, fontsize=6)
    bars.invert_yaxis()
    lo = min(min(r["binary_nDCG@10"], r["weighted_nDCG@10"]) for r in rows)
    bars.set(xlim=(max(0.0, lo - 0.05), None), xlabel="test nDCG@10", title=f"{name}: kept head on test")
    bars.legend(fontsize=7)
    return {f"{name} dev curves and test scores": save(fig, out_dir / f"training_{name}.png")}


register(Study(
    name="training",
    title="training recipes against the untrained head: test nDCG@10 binary/weighted, density, dev curves",
    paper="UHD-BERT §3.4 and A.1 (training); issue 16's recipes (distillation, binary-aware, density penalties)",
    run=run,
    defaults=DEFAULTS,
))
