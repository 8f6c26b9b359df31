"""The training recipe: settings (Recipe) and how to train a UHD encoder on one collection with them.

Training pairs come from a collection's train qrels (a share held out as a dev split) and from the Inverse Cloze
Task; the WTA heads are centred first; optional BM25 hard negatives and a dense teacher; dev nDCG@10 early
stopping in which the untrained head (step 0) competes. The named settings are in presets.py.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from uhdsearch.baselines.bm25 import BM25Retriever
from uhdsearch.baselines.dense import DenseRetriever, mean_pool
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import TokenStates, compute_token_states
from uhdsearch.encoder.top_layers import cut_layer, input_layers
from uhdsearch.errors import UsageError
from uhdsearch.evaluation.datasets import BeirData, load_beir
from uhdsearch.index.base import check_length_norm
from uhdsearch.search.lengthnorm import LENGTH_NORM
from uhdsearch.training.data import TrainingPair, ict_pairs, pairs_from_qrels
from uhdsearch.training.dev_checks import DevCheck, DevSplit, announce
from uhdsearch.recipes.mining import ModelMiner, mine_with_teacher
from uhdsearch.training.negatives import hard_negatives_from_rankings, positives_by_query
from uhdsearch.recipes.teachers import CachedTeacher, DenseTeacher, SumOfMaxTeacher, rank_with_teacher
from uhdsearch.training.trainer import TeacherScorer, TrainingArgs, TrainingResult, train
from uhdsearch.training.transfer import load_head
from uhdsearch.types import Document, Query

logger = logging.getLogger(__name__)

# `seed` is a field of both parts, so it is set through `encoder=` or `training=` only.
_ENCODER_FIELDS = frozenset(f.name for f in dataclasses.fields(EncoderConfig)) - {"seed"}
_TRAINING_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainingArgs)) - {"seed"}
_ALIASES = {"max_train_minutes": "max_minutes"}  # the name Recipe used before it held a TrainingArgs

TEACHERS = ("dense", "sum-of-max")


@dataclass(frozen=True, init=False)
class Recipe:
    """An encoder's settings, the training loop's, and the recipe's own; the defaults are the quickstart's.

    Keywords named after an EncoderConfig or TrainingArgs field change that field of `encoder` or `training`, and
    reading one returns it, so the quickstart with a smaller head is one line:

    >>> recipe = Recipe(dim=8_192, epochs=2.0)
    >>> (recipe.encoder.dim, recipe.dim, recipe.wta_k, recipe.training.epochs, recipe.ict_per_document)
    (8192, 8192, 40, 2.0, 1)
    >>> dataclasses.replace(recipe, learning_rate=1e-3).training.learning_rate
    0.001
    """

    # README "The default recipe": one bucket on the last layer; SciFact claims are long, so no query truncation
    # (the paper's query_k=100, Table 4, costs ~0.12 nDCG@10); documents to 256 tokens instead of A.1's 180.
    encoder: EncoderConfig = EncoderConfig(dim=32_768, wta_k=40, query_k=None, document_max_length=256)
    # Chosen on SciFact dev (benchmarks/experiments/training_probe.py, README "What training earns"): InfoNCE through
    # the binarized buckets (straight-through), lr 1e-3, 3 epochs capped at 450 steps; dev nDCG@10 at step 0 and every
    # 50 steps with the best weights kept (the untrained head competes). The minute cap only guards slow machines.
    training: TrainingArgs = TrainingArgs(loss="infonce", binary_aware=True, learning_rate=1e-3, epochs=3.0,
                                          max_steps=450, eval_every=50, max_minutes=20.0)
    ict_per_document: int = 1  # Inverse Cloze Task pairs per passage (Luan et al. §7), 0 = none
    center: bool = True  # initialise WTA biases so the mean token state projects to zero (WTALayer.center_)
    use_train_qrels: bool = True  # pairs from the collection's train qrels when it has them
    hard_negative_depth: int = 0  # > 0: one BM25 hard negative per pair from the query's top N
    dev_share: float = 0.1  # of the train queries, held out for early stopping (when training.eval_every)
    # Without train qrels, the held-out share of the corpus's own ICT queries is judged by this teacher: its top
    # `judged_depth` documents are relevant (plus the sentence's source passage), so early stopping needs no labels.
    teacher: str = "dense"  # "dense" (the backbone, mean-pooled) or "sum-of-max" (its token states, late interaction)
    # Who judges that dev split; None: `teacher`. Fix it to compare recipes that distil from different teachers.
    dev_teacher: str | None = None
    # The dev checks' binary score: the alpha of the length-normalized score that search uses by default
    # (search/lengthnorm.py), so the kept step is chosen on the deployed score (session 15; README "Choosing on the
    # deployed score"), or 0: plain counts, what every figure before session 15 chose with.
    dev_length_norm: float = LENGTH_NORM
    judged_depth: int = 10
    # Mining (recipes/mining.py). Corpus (ICT) queries: the teacher's top `mined_positives` are positives beside
    # the source passage; `teacher_negative_depth` > 0: one negative per pair from the teacher's ranks
    # `negative_skip`..depth, never a positive. ANCE: with `remine_every` (a TrainingArgs field) the negatives are
    # re-mined from the model's own ranking of `remine_documents` sampled passages, ranks `negative_skip`..
    # `remine_depth`. The skipped top ranks are likely unjudged positives.
    mined_positives: int = 0
    teacher_negative_depth: int = 0
    negative_skip: int = 10
    remine_documents: int = 1_000
    remine_depth: int = 30
    # After training (frozen backbone, with a dev split): query token limits tried on dev, for the kept weights
    # and the untrained head alike; CISI's and Medline's paragraph-long queries lose much at A.1's 32 tokens.
    query_lengths: tuple[int, ...] = (32, 64, 128, 256)
    init_head: str | None = None  # a trained model's directory: its heads start here (training/transfer.py)

    def __init__(self, encoder: EncoderConfig | None = None, training: TrainingArgs | None = None,
                 **settings: Any) -> None:
        own = {f.name: f.default for f in dataclasses.fields(Recipe) if f.name not in ("encoder", "training")}
        encoder = Recipe.encoder if encoder is None else encoder
        training = Recipe.training if training is None else training
        settings = {_ALIASES.get(k, k): v for k, v in settings.items()}
        unknown = set(settings) - set(own) - _ENCODER_FIELDS - _TRAINING_FIELDS
        if unknown:
            raise TypeError(f"unknown Recipe setting(s) {sorted(unknown)}; give seed through encoder= or training=")
        in_encoder = {k: v for k, v in settings.items() if k in _ENCODER_FIELDS}
        in_training = {k: v for k, v in settings.items() if k in _TRAINING_FIELDS}
        object.__setattr__(self, "encoder", encoder.replace(**in_encoder) if in_encoder else encoder)
        object.__setattr__(self, "training", dataclasses.replace(training, **in_training))
        for name, default in own.items():
            object.__setattr__(self, name, settings.get(name, default))
        if min(self.ict_per_document, self.hard_negative_depth, self.mined_positives, self.teacher_negative_depth,
               self.negative_skip) < 0:
            raise UsageError("ict_per_document, hard_negative_depth, mined_positives, teacher_negative_depth and "
                             "negative_skip must be >= 0")
        if self.remine_documents < 1 or self.remine_depth <= self.negative_skip:
            raise UsageError(f"remine_documents={self.remine_documents} must be >= 1 and remine_depth="
                             f"{self.remine_depth} above negative_skip={self.negative_skip}")
        if self.teacher_negative_depth and self.teacher_negative_depth <= max(self.negative_skip,
                                                                               self.mined_positives):
            raise UsageError(f"teacher_negative_depth={self.teacher_negative_depth} must exceed negative_skip and "
                             "mined_positives (negatives come from below the positives)")
        if not 0.0 <= self.dev_share < 1.0:
            raise UsageError(f"dev_share={self.dev_share} must be in [0, 1)")
        for name in ("teacher", "dev_teacher"):
            value = getattr(self, name)
            if value not in TEACHERS and not (name == "dev_teacher" and value is None):
                raise UsageError(f"{name}={value!r}; choose one of {', '.join(TEACHERS)}")
        if any(not isinstance(n, int) or n < 1 for n in self.query_lengths):
            raise UsageError(f"query_lengths={self.query_lengths} must be positive integers (token limits)")
        if self.judged_depth < 1:
            raise UsageError(f"judged_depth={self.judged_depth} must be >= 1")
        check_length_norm(self.dev_length_norm, "binary")

    def __getattr__(self, name: str) -> Any:
        name = _ALIASES.get(name, name)
        part = "encoder" if name in _ENCODER_FIELDS else "training" if name in _TRAINING_FIELDS else None
        if part is None or part not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self.__dict__[part], name)

    def to_json(self) -> dict[str, Any]:
        """Every setting, the encoder's and the loop's nested, tuples as lists (for results files)."""
        return _lists(dataclasses.asdict(self))

    def flat_json(self) -> dict[str, Any]:
        """to_json() flattened: {"encoder.dim": 32768, ...} (model cards, cache keys)."""
        return _flat(self.to_json())


def _flat(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return list(value) if isinstance(value, tuple) else value


def train_on_collection(
    model: UHDEncoder, documents: list[Document], train_data: BeirData | None, recipe: Recipe,
    states: TokenStates | None = None, dense: DenseRetriever | None = None, show_progress: bool = True,
    query_states: TokenStates | None = None,
) -> tuple[TrainingResult, int]:
    """Train `model`'s WTA heads on qrels pairs (if any) plus Inverse Cloze Task pairs of `documents`.

    The loop's settings are `recipe.training`; `model` carries its encoder settings already. `query_states`
    (optional, to share across runs): see trainer.train.

    Returns:
        (TrainingResult, number of training pairs).
    """
    args = recipe.training
    cached = cached_layers(model, args.train_backbone_layers)  # None: the whole backbone trains
    if states is None:
        layers = sorted(set(model.layers) | {model.backbone.n_layers} | set(cached or ()))
        states = compute_token_states(model.backbone, [d.full_text for d in documents], layers,
                                      model.config.document_max_length, show_progress=show_progress)
    if recipe.init_head:
        load_head(model, recipe.init_head)
    if recipe.center:
        model.center_buckets(states)
    pairs, dev = training_pairs(documents, train_data, recipe)
    teacher = None
    mining = recipe.mined_positives > 0 or recipe.teacher_negative_depth > 0
    unlabelled = dev is not None and not _has_qrels(train_data, recipe)
    # Teachers read a backbone that does not train (the model's own when it is frozen).
    frozen = model.backbone if args.train_backbone_layers == 0 else copy.deepcopy(model.backbone)
    if args.distill_weight > 0 or args.loss in ("kl", "margin_mse") or unlabelled or mining:
        teacher = build_teacher(recipe.teacher, frozen, documents, states, dense)
    mined_negatives = None
    if mining:
        # sum-of-max ranks the dense backbone's candidates: scoring every passage per query would cost minutes
        first = build_teacher("dense", frozen, documents, states, dense) if recipe.teacher != "dense" else None
        pairs, mined_negatives = mine_with_teacher(teacher, documents, pairs, recipe.mined_positives,
                                                   recipe.teacher_negative_depth, recipe.negative_skip, first,
                                                   args.seed)
    if unlabelled:
        judge = teacher if recipe.dev_teacher in (None, recipe.teacher) else \
            build_teacher(recipe.dev_teacher, frozen, documents, states, dense)
        dev = teacher_judged(judge, documents, dev, recipe.judged_depth)
    # With the top layers training, dev documents are re-encoded from the states at their input.
    eval_fn = dev_evaluator(states.select(cached) if cached else None, documents, dev,
                            length_norm=recipe.dev_length_norm, frozen_backbone=args.train_backbone_layers == 0,
                            show_progress=show_progress) if dev and args.eval_every else None
    negatives = bm25_negatives(documents, pairs, recipe.hard_negative_depth) if recipe.hard_negative_depth > 0 \
        else mined_negatives
    remine = None
    if args.remine_every:
        if cached != list(model.layers):
            raise UsageError("remine_every (ANCE) needs a frozen backbone (train_backbone_layers=0)")
        queries = sorted({p.query for p in pairs})
        if query_states is None:
            query_states = compute_token_states(model.backbone, queries, cached, model.config.query_max_length,
                                                show_progress=show_progress, desc="backbone queries")
        remine = ModelMiner(pairs, queries, query_states.select(cached), states.select(cached),
                            recipe.remine_documents, recipe.remine_depth, recipe.negative_skip, seed=args.seed)
    untrained = trainable_state(model, args.train_backbone_layers)
    result = train(model, documents, pairs, args, document_states=states if cached else None,
                   query_states=query_states if cached else None, hard_negatives=negatives, teacher=teacher,
                   eval_fn=eval_fn, show_progress=show_progress, remine=remine)
    if eval_fn is not None and recipe.query_lengths and cached:
        result.selection = choose_head_and_query_length(model, untrained, eval_fn, recipe.query_lengths)
    return result, len(pairs)


def cached_layers(model: UHDEncoder, train_backbone_layers: int) -> list[int] | None:
    """The backbone layers whose token states training reads (computed once), or None when all of it trains."""
    if train_backbone_layers == 0:
        return list(model.layers)
    if train_backbone_layers < 0 or train_backbone_layers >= model.backbone.n_layers:
        return None
    return input_layers(model.layers, cut_layer(model.backbone, train_backbone_layers))


def trainable_state(model: UHDEncoder, train_backbone_layers: int) -> dict[str, Any]:
    """A copy of what training changes: the WTA heads, and the top backbone layers that train with them."""
    n = model.backbone.n_layers if train_backbone_layers < 0 else train_backbone_layers
    top = tuple(f"backbone.model.encoder.layer.{i}." for i in range(model.backbone.n_layers - n,
                                                                  model.backbone.n_layers))
    everything = train_backbone_layers < 0 or train_backbone_layers >= model.backbone.n_layers
    return {k: v.detach().clone() for k, v in model.state_dict().items()
            if k.startswith("buckets.") or k.startswith(top) or (everything and k.startswith("backbone."))}


def choose_head_and_query_length(
    model: UHDEncoder, untrained: dict, score: Callable[[UHDEncoder], float], lengths: Sequence[int],
) -> dict[str, Any]:
    """Pick the query token limit and the head (the weights training kept, or the untrained start) together on dev.

    `untrained`: trainable_state(model, ...) before training (the heads, and any trained top backbone layers).

    The untrained head and shorter limits come first, so they win ties. Leaves `model` holding the choice.
    """
    trained = {k: v.detach().clone() for k, v in model.state_dict().items() if k in untrained}
    config = model.config
    rows = []
    for head, state in (("untrained", untrained), ("trained", trained)):
        model.load_state_dict(state, strict=False)
        for length in sorted(set(lengths)):
            model.config = config.replace(query_max_length=int(length))
            start = time.perf_counter()
            rows.append({"head": head, "query_max_length": int(length), "dev": score(model)})
            announce(f"{head} head, queries cut at {length} tokens", rows[-1]["dev"], time.perf_counter() - start)
    best = max(rows, key=lambda r: r["dev"])  # max keeps the first of equal scores
    model.load_state_dict(untrained if best["head"] == "untrained" else trained, strict=False)
    model.config = config.replace(query_max_length=best["query_max_length"])
    logger.info("kept the %s head with queries cut at %d tokens (dev %.4f)", best["head"], best["query_max_length"],
                best["dev"])
    return {"head": best["head"], "query_max_length": best["query_max_length"], "dev": best["dev"], "tried": rows}


def bm25_negatives(documents: Sequence[Document], pairs: Sequence[TrainingPair], depth: int) -> list[int | None]:
    """One BM25 hard negative per pair (a document row, or None) from its query's top `depth`, never a positive.

    Args:
        documents: the corpus list; a negative is a row of it.
        pairs: training pairs; their query texts are searched once each.
        depth: BM25 hits per query to draw from.

    Returns:
        One row or None (no candidate that is not a positive) per pair, in `pairs` order.
    """
    bm25 = BM25Retriever.build(documents, show_progress=False)
    queries = sorted({p.query for p in pairs})
    run = bm25.search({str(i): q for i, q in enumerate(queries)}, k=depth)
    row = {d.doc_id: i for i, d in enumerate(documents)}
    rankings = {q: [row[h.doc_id] for h in run[str(i)]] for i, q in enumerate(queries)}
    positives = positives_by_query(pairs)
    return hard_negatives_from_rankings(pairs, rankings, positives, depth=depth)


def load_train_split(data_dir: str | Path, train_split: str | None) -> BeirData | None:
    """The collection's `train_split` qrels and queries, or None (ICT pairs only) where it has none."""
    data_dir = Path(data_dir)
    if train_split and (data_dir / "qrels" / f"{train_split}.tsv").is_file():
        return load_beir(data_dir, train_split)
    logger.info("no '%s' qrels in %s: training on Inverse Cloze Task pairs only", train_split, data_dir)
    return None


def _has_qrels(train_data: BeirData | None, recipe: Recipe) -> bool:
    return train_data is not None and recipe.use_train_qrels


def training_pairs(
    documents: Sequence[Document], train_data: BeirData | None, recipe: Recipe,
) -> tuple[list[TrainingPair], DevSplit | None]:
    """Qrels pairs of the train queries not held out, then ICT pairs; and the dev split (queries, qrels) or None.

    The held-out share is the first `dev_share` of the train queries shuffled with seed 0; no dev split
    without `training.eval_every`. Without train qrels the share is held out of the ICT queries instead, each
    judged by its source passage only (`teacher_judged` adds the teacher's judgments).
    """
    rows = {d.doc_id: i for i, d in enumerate(documents)}
    pairs: list[TrainingPair] = []
    dev: DevSplit | None = None
    if not _has_qrels(train_data, recipe):
        pairs = ict_pairs(documents, per_document=recipe.ict_per_document) if recipe.ict_per_document else []
        texts = sorted({p.query for p in pairs})
        random.Random(0).shuffle(texts)
        n_dev = int(len(texts) * recipe.dev_share) if recipe.training.eval_every else 0
        if n_dev == 0:
            return pairs, None
        held_out = {t: f"corpus-dev-{i}" for i, t in enumerate(texts[:n_dev])}
        qrels = {held_out[p.query]: {documents[p.doc_row].doc_id: 1} for p in pairs if p.query in held_out}
        dev = ([Query(qid, t) for t, qid in held_out.items()], qrels)
        return [p for p in pairs if p.query not in held_out], dev
    if train_data is not None:
        queries = list(train_data.queries)
        random.Random(0).shuffle(queries)
        n_dev = int(len(queries) * recipe.dev_share) if recipe.training.eval_every else 0
        dev_queries, train_queries = queries[:n_dev], queries[n_dev:]
        pairs += pairs_from_qrels(train_queries, train_data.qrels, rows)
        if dev_queries:
            dev = (dev_queries, {q.query_id: train_data.qrels[q.query_id] for q in dev_queries})
    if recipe.ict_per_document:
        pairs += ict_pairs(documents, per_document=recipe.ict_per_document)
    return pairs, dev


def dev_evaluator(
    states: TokenStates | None, documents: Sequence[Document], dev: DevSplit, n_documents: int = 1_000,
    length_norm: float = 0.0, frozen_backbone: bool = False, show_progress: bool = False,
) -> DevCheck:
    """nDCG@10 of UHD-binary on held-out train queries over their positives plus a random sample of documents.

    A sample keeps each evaluation to seconds; states=None re-encodes (the backbone is training). What does not
    change between checks is computed once (training/dev_checks.py).
    length_norm: 0 scores plain counts, the model's own score; alpha > 0 the length-normalized search score.
    """
    return DevCheck(states, documents, dev, n_documents, length_norm, frozen_backbone, show_progress)


def build_teacher(
    name: str, backbone: Backbone, documents: Sequence[Document], states: TokenStates,
    dense: DenseRetriever | None = None,
) -> TeacherScorer:
    """`backbone` as a teacher over `documents`, from the token states the recipe computed anyway.

    Give a backbone that does not train (a copy, when some of the model's layers train): the teacher encodes each
    query when it first sees it, so a drifting backbone would score later queries differently.
    """
    if name == "sum-of-max":
        from uhdsearch.baselines.multivector import SumOfMaxReranker

        reranker = SumOfMaxReranker.build(documents, backbone=backbone, states=states, show_progress=False)
        return CachedTeacher(SumOfMaxTeacher.from_reranker(reranker))
    dense = dense or DenseRetriever.build(documents, backbone=backbone, states=states, show_progress=False)
    return CachedTeacher(DenseTeacher(None, mean_pool(states, backbone.n_layers), dense.encode_queries))


def teacher_judged(teacher: TeacherScorer, documents: Sequence[Document], dev: DevSplit, depth: int) -> DevSplit:
    """Judge held-out corpus queries by the teacher: its top `depth` documents are relevant (1), as is each
    query's source passage (2, it holds the sentence), so early stopping needs no human labels."""
    queries, qrels = dev
    ranked = rank_with_teacher(teacher, [q.text for q in queries], documents, depth=depth, show_progress=False)
    judged = {}
    for q in queries:
        rel = {documents[r].doc_id: 1 for r in ranked.ranking(q.text)}
        judged[q.query_id] = {**rel, **{d: 2 for d in qrels.get(q.query_id, {})}}
    return queries, judged


def query_vectors(dense: DenseRetriever, texts: Iterable[str]) -> dict[str, np.ndarray]:
    """The dense retriever's embedding of each query text (the distillation teacher's queries)."""
    texts = sorted(texts)
    return dict(zip(texts, dense.encode_queries(texts)))
