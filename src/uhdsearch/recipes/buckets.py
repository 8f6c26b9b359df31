"""Several buckets trained jointly or separately (paper §3.5, A.3, Table 6), and bucket weights chosen on dev.

Joint: every WTA layer of one encoder trains through the summed (bucket-weighted) score; the layers can interfere.
Separate: each bucket trains alone as a one-bucket encoder on its own score (its own early stopping, where its
untrained start competes), then `combine` puts the layers into one multi-bucket encoder. Bucket i of a
multi-bucket config is seeded `seed + i` (encoder/buckets.py), so the separate models start where the joint one does.
"""
from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import TokenStates
from uhdsearch.errors import UsageError
from uhdsearch.evaluation.datasets import BeirData
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.sparse import SparseEncoding
from uhdsearch.topk import top_k
from uhdsearch.recipes.recipe import Recipe, train_on_collection
from uhdsearch.training.trainer import TrainingResult
from uhdsearch.types import Document, Run, ScoredDoc

PAPER_GRID = (0.0, 0.33, 0.66, 1.0)  # A.3's grid of weights per bucket


def bucket_config(config: EncoderConfig, i: int) -> EncoderConfig:
    """The one-bucket config of bucket `i` of `config`, seeded as that bucket is in the multi-bucket encoder.

    >>> bucket_config(EncoderConfig(dim=1024, wta_k=8, bucket_layers=(2, 4, 6), seed=5), 1).bucket_layers
    (4,)
    """
    return config.replace(bucket_layers=(config.bucket_layers[i],), bucket_weights=None, seed=config.seed + i)


def combine(models: Sequence[UHDEncoder], bucket_weights: Sequence[float] | None = None) -> UHDEncoder:
    """One multi-bucket encoder holding each one-bucket model's WTA layer, in the given order.

    The models must share one backbone object (frozen while they trained) and differ only in layer and seed.
    """
    if not models or any(m.config.n_buckets != 1 for m in models):
        raise UsageError("combine takes one or more one-bucket encoders")
    first = models[0]
    if any(m.backbone is not first.backbone for m in models):
        raise UsageError("combine needs encoders that share one backbone object (trained with it frozen)")
    keep = ("bucket_layers", "bucket_weights", "seed")
    for m in models[1:]:
        differ = [f.name for f in dataclasses.fields(EncoderConfig)
                  if f.name not in keep and getattr(m.config, f.name) != getattr(first.config, f.name)]
        if differ:
            raise UsageError(f"combine: the models' configs differ in {differ}")
    config = first.config.replace(bucket_layers=tuple(m.config.bucket_layers[0] for m in models),
                                  bucket_weights=None if bucket_weights is None else tuple(bucket_weights))
    combined = UHDEncoder(first.backbone, config, initialize=False)
    for model, layer in zip(models, combined.layers):
        combined.buckets.wta[str(layer)].load_state_dict(model.buckets.wta[str(model.layers[0])].state_dict())
    combined.eval()
    return combined


def train_separately(
    backbone, documents: list[Document], train_data: BeirData | None, recipe: Recipe, states: TokenStates,
    query_states: TokenStates | None = None, show_progress: bool = True,
) -> tuple[UHDEncoder, list[TrainingResult]]:
    """Train each bucket of `recipe.encoder` alone with the recipe, then combine them (weights: the config's).

    `states` must hold every bucket layer of the documents; `query_states` (optional) the training queries'
    (recipe.training_pairs order). The recipe's query-length choice is skipped: the buckets share one config.
    """
    models, results = [], []
    for i in range(recipe.encoder.n_buckets):
        single = dataclasses.replace(recipe, encoder=bucket_config(recipe.encoder, i), query_lengths=())
        model = UHDEncoder(backbone, single.encoder)
        result, _ = train_on_collection(model, documents, train_data, single, states=states,
                                        query_states=query_states, show_progress=show_progress)
        models.append(model)
        results.append(result)
    return combine(models, recipe.encoder.bucket_weights), results


def train_jointly(
    backbone, documents: list[Document], train_data: BeirData | None, recipe: Recipe, states: TokenStates,
    query_states: TokenStates | None = None, show_progress: bool = True,
) -> tuple[UHDEncoder, TrainingResult]:
    """Train every bucket of `recipe.encoder` at once through the summed, bucket-weighted score.

    Args:
        backbone: the frozen Backbone the states come from.
        documents: the corpus list (its order is the rows of `states`).
        train_data: the collection's train split (qrels pairs), or None for ICT pairs only.
        recipe: the settings; its `encoder` names the bucket layers and weights.
        states: token states of `documents` holding every bucket layer.
        query_states: token states of the training queries, when already computed (shared by several runs).
        show_progress: tqdm bars on stderr.

    Returns:
        (model, result): the trained multi-bucket UHDEncoder and its TrainingResult (dev curve, kept step).
    """
    model = UHDEncoder(backbone, recipe.encoder)
    result, _ = train_on_collection(model, documents, train_data, dataclasses.replace(recipe, query_lengths=()),
                                    states=states, query_states=query_states, show_progress=show_progress)
    return model, result


# ------------------------------------------------------------------ bucket weights on precomputed scores
def weight_grid(n_buckets: int, values: Sequence[float] = PAPER_GRID) -> np.ndarray:
    """Every weight vector of `values` per bucket that ranks differently, equal weights first.

    Vectors that are multiples of each other rank alike, so each is kept once, scaled to max 1; the all-zero
    vector is left out. Ties in a later argmax go to the earlier row: equal weights, then nearest to them.

    >>> weight_grid(2, (0.0, 0.5, 1.0)).tolist()
    [[1.0, 1.0], [1.0, 0.5], [0.5, 1.0], [1.0, 0.0], [0.0, 1.0]]
    """
    rows = {}
    for w in itertools.product(values, repeat=n_buckets):
        w = np.asarray(w, dtype=np.float64)
        if w.max() <= 0:
            continue
        rows.setdefault(tuple(np.round(w / w.max(), 6)), None)
    ordered = sorted(rows, key=lambda w: (float(np.sum((np.asarray(w) - 1.0) ** 2)), tuple(-x for x in w)))
    return np.array(ordered, dtype=np.float64)


def bucket_scores(queries: SparseEncoding, documents: SparseEncoding, scoring: str) -> list[np.ndarray]:
    """Per bucket, the dense (n_queries, n_docs) float64 scores: shared active dims ("binary") or dot products."""
    if scoring not in ("binary", "weighted"):
        raise UsageError(f"scoring={scoring!r}; choose 'binary' or 'weighted'")
    if scoring == "binary":
        queries, documents = queries.binarize(), documents.binarize()
    return [(q.astype(np.float64) @ d.astype(np.float64).T).toarray() for q, d in zip(queries.buckets,
                                                                                  documents.buckets)]


def rank(scores: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str], k: int = 100) -> Run:
    """Top-k positive scores per row as a Run; equal scores by document number, as the index kernels order them."""
    run = Run(name="buckets")
    for qid, row in zip(query_ids, scores):
        numbers, values = top_k(row, k)
        run.results[qid] = [ScoredDoc(doc_ids[i], float(v)) for i, v in zip(numbers, values)]
    return run


def tune_weights(scores: Sequence[np.ndarray], query_ids: Sequence[str], qrels, doc_ids: Sequence[str],
                 grid: np.ndarray, measure: str = "nDCG@10") -> tuple[np.ndarray, list[float]]:
    """The grid row whose weighted sum of per-bucket `scores` (see bucket_scores) ranks best by `measure` on
    `qrels` (a dev split, never a test split), the first of equal ones; and every row's mean `measure`."""
    values = [evaluate(rank(sum(w_b * s for w_b, s in zip(w, scores)), query_ids, doc_ids, k=10), qrels,
                       [measure])[measure] for w in grid]
    return grid[int(np.argmax(values))], values
