"""The one comparison: build or train every registered system on a BEIR collection, evaluate, test against BM25.

Systems live in a registry, name -> builder(ctx) -> retriever; adding one is one line. Builders share expensive
work through the `SystemContext` (the backbone, one backbone pass over the corpus, the trained UHD model, other
systems and their runs, so the hybrids reuse BM25's run instead of searching again).

Out of domain (a training collection other than the evaluated one) every learned part learns from the source
collection alone, as in Jung et al. Table 3 ("evaluated on the target data using the models trained with the
source data"): UHD and the DE/ME heads train on its train split and corpus, and whitening, flows and UHD's
centering are fit on its corpus. The target corpus is only indexed and searched.
"""
from __future__ import annotations

import logging
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from uhdsearch.baselines.bm25 import BM25Retriever, wordpiece_analyzer
from uhdsearch.baselines.hybrid import HybridRetriever
from uhdsearch.evaluation.datasets import BeirData, bundled_dataset_dir, load_beir
from uhdsearch.evaluation.experiment import Comparison, compare
from uhdsearch.evaluation.metrics import DEFAULT_MEASURES
from uhdsearch.io import write_json
from uhdsearch.types import Document, Qrels, Query, Retriever, Run, as_queries

logger = logging.getLogger(__name__)

Builder = Callable[["SystemContext"], Retriever]
SYSTEMS: dict[str, Builder] = {}
BASELINE = "bm25"
DEV_QUERIES = 200  # train-split queries the hybrid weights are tuned on


def register(name: str) -> Callable[[Builder], Builder]:
    """Decorator: add a builder to `SYSTEMS` under `name`."""

    def add(builder: Builder) -> Builder:
        SYSTEMS[name] = builder
        return builder

    return add


class SystemContext:
    """What builders share: the data, settings, and memoized expensive work, each timed once.

    Attributes:
        data: The evaluation split (corpus, queries, qrels).
        train_data: Labelled training split (the collection's own train split, or --train-data's), or None.
        train_documents: The source corpus that UHD and the DE/ME heads train on and whitening, flows and WTA
            centering are fit on (the evaluation corpus unless --train-data is given).
        in_domain: Whether training data comes from the evaluated collection.
        source_name: Name of the collection trained and fit on (the evaluated one in domain).
        backbone_dir: Local backbone directory (None: the bundled MiniLM).
        fast: Use the quickstart's fast UHD recipe.
        recipe: Explicit UHD recipe (overrides fast).
        max_length: Document token limit for every neural system.
        k: Result depth.
    """

    def __init__(self, data: BeirData, train_data: BeirData | None, train_documents: list[Document],
                 in_domain: bool, backbone_dir: str | os.PathLike | None = None, fast: bool = False,
                 recipe: Any = None, max_length: int = 256, k: int = 1000, show_progress: bool = True,
                 source_name: str | None = None) -> None:
        self.data, self.train_data, self.train_documents = data, train_data, train_documents
        self.source_name = source_name or data.name
        self.in_domain, self.backbone_dir, self.fast, self.recipe = in_domain, backbone_dir, fast, recipe
        self.max_length, self.k, self.show_progress = max_length, k, show_progress
        self.documents = list(data.corpus.values())
        self.build_seconds: dict[str, float] = {}
        self.shared_seconds: dict[str, float] = {}
        self.notes: dict[str, Any] = {}
        self._shared: dict[str, Any] = {}
        self._systems: dict[str, Retriever] = {}
        self._frames: list[float] = []  # time spent in nested timed work, per open frame

    # ------------------------------------------------------------------ sharing
    def shared(self, key: str, make: Callable[[], Any]) -> Any:
        """`make()` once per key; its time goes to ``shared_seconds[key]``, not to the system that asked."""
        if key not in self._shared:
            self._shared[key], self.shared_seconds[key] = self._timed(make)
        return self._shared[key]

    def system(self, name: str) -> Retriever:
        """The built system `name` (built once; search results memoized, see `CachedRetriever`)."""
        if name not in self._systems:
            if name not in SYSTEMS:
                raise ValueError(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")
            logger.info("building %s", name)
            built, self.build_seconds[name] = self._timed(lambda: SYSTEMS[name](self))
            self._systems[name] = CachedRetriever(built)
        return self._systems[name]

    def _timed(self, make: Callable[[], Any]) -> tuple[Any, float]:
        start = time.perf_counter()
        self._frames.append(0.0)
        try:
            value = make()
        finally:
            nested = self._frames.pop()
        total = time.perf_counter() - start
        if self._frames:
            self._frames[-1] += total
        return value, total - nested

    # ------------------------------------------------------------------ shared work
    @property
    def backbone(self):
        from uhdsearch.encoder.backbone import Backbone

        return self.shared("backbone", lambda: Backbone.from_pretrained(self.backbone_dir).eval())

    def document_states(self, layers: Sequence[int] | None = None):
        """Token states of the evaluation corpus (one backbone pass; the last layer by default)."""
        return self._corpus_states("backbone-states", self.documents, layers, "backbone (shared)")

    def source_states(self, layers: Sequence[int] | None = None):
        """Token states of the source corpus (`train_documents`), which training and every fit transform use.

        In domain these are `document_states`; out of domain one backbone pass over the whole training
        collection, shared by all systems. No sample: UHD and the DE/ME heads train on all of it anyway, and
        sequence-wise whitening estimates a hidden x hidden covariance (384 x 384 for MiniLM) from one vector
        per document, which about 1,000 documents do poorly (in domain on Medline's 1,033 it falls 0.79 -> 0.50).
        """
        if self.in_domain:
            return self.document_states(layers)
        return self._corpus_states("source-states", self.train_documents, layers, "backbone (source)")

    def _corpus_states(self, key: str, documents: list[Document], layers: Sequence[int] | None, desc: str):
        """One shared backbone pass over `documents` for `layers` plus the last layer."""
        from uhdsearch.encoder.states import compute_token_states

        bb = self.backbone
        layers = tuple(sorted(set(layers or ()) | {bb.n_layers}))
        return self.shared(f"{key}{list(layers)}", lambda: compute_token_states(
            bb, [d.full_text for d in documents], list(layers), self.max_length,
            show_progress=self.show_progress, desc=desc))

    def dev(self) -> tuple[list[Query], Qrels] | None:
        """Dev queries for tuning (never the test split): up to 200 train-split queries of this collection."""
        if not self.in_domain or self.train_data is None:
            return None
        queries = list(self.train_data.queries)
        random.Random(0).shuffle(queries)
        queries = queries[:DEV_QUERIES]
        return queries, {q.query_id: self.train_data.qrels[q.query_id] for q in queries}


class CachedRetriever:
    """A retriever whose runs are memoized per (queries, k); a smaller k is cut from a larger cached run.

    Every uhdsearch retriever's top k is the head of its top K (fixed tie rule), so the cut is exact.
    """

    def __init__(self, retriever: Retriever) -> None:
        self.retriever = retriever
        self._runs: dict[tuple, tuple[int, Run]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.retriever, name)

    def search(self, queries, k: int = 1000) -> Run:
        """Search, or cut a cached run of the same queries with at least `k` results."""
        queries = as_queries(queries)
        key = tuple((q.query_id, q.text) for q in queries)
        cached = self._runs.get(key)
        if cached is None or cached[0] < k:
            self._runs[key] = (k, self.retriever.search(queries, k))
        depth, run = self._runs[key]
        if depth == k:
            return run
        return Run({q: hits[:k] for q, hits in run.results.items()}, name=run.name)


# ------------------------------------------------------------------ the registry
@register("bm25")
def _bm25(ctx: SystemContext) -> Retriever:
    return BM25Retriever.build(ctx.data.corpus, show_progress=False)


def _wordpiece_bm25(ctx: SystemContext, bigrams: bool) -> Retriever:
    name = "bm25-bi" if bigrams else "bm25-uni"
    analyzer = wordpiece_analyzer(ctx.backbone.tokenizer, bigrams=bigrams)
    return BM25Retriever.build(ctx.data.corpus, analyzer=analyzer, name=name, show_progress=False)


register("bm25-uni")(lambda ctx: _wordpiece_bm25(ctx, bigrams=False))
register("bm25-bi")(lambda ctx: _wordpiece_bm25(ctx, bigrams=True))


@register("splade-tiny")
def _splade(ctx: SystemContext) -> Retriever:
    from uhdsearch.baselines.splade import SpladeRetriever

    return SpladeRetriever.build(ctx.data.corpus, max_length=ctx.max_length, show_progress=ctx.show_progress)


@register("dense")
def _dense(ctx: SystemContext) -> Retriever:
    from uhdsearch.baselines.dense import DenseRetriever

    return DenseRetriever.build(ctx.data.corpus, backbone=ctx.backbone, states=ctx.document_states(),
                                max_length=ctx.max_length, show_progress=False)


def _uhd_model(ctx: SystemContext):
    """The quickstart recipe's UHD model and its document encoding, trained once for both variants."""

    def make():
        from uhdsearch.encoder.config import EncoderConfig
        from uhdsearch.encoder.model import UHDEncoder
        from uhdsearch.training.presets import FAST
        from uhdsearch.training.recipe import Recipe, train_on_collection

        recipe = ctx.recipe or replace(Recipe(**FAST) if ctx.fast else Recipe(), document_max_length=ctx.max_length)
        config = EncoderConfig(dim=recipe.dim, wta_k=recipe.wta_k, query_k=recipe.query_k,
                               bucket_layers=recipe.bucket_layers, bucket_weights=recipe.bucket_weights,
                               document_max_length=recipe.document_max_length)
        model = UHDEncoder(ctx.backbone, config)
        layers = sorted(set(model.layers) | {ctx.backbone.n_layers})
        # Out of domain: train (and center) on the other collection, then encode this one.
        train_states, states = ctx.source_states(layers), ctx.document_states(layers)
        result, n_pairs = train_on_collection(model, ctx.train_documents, ctx.train_data, recipe, train_states,
                                              show_progress=ctx.show_progress)
        ctx.notes["uhd"] = {"recipe": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(recipe).items()},
                            "training_pairs": n_pairs, "training_steps": result.steps,
                            "best_dev_step": result.best_step}
        encoded = model.encode_states(states, "document", show_progress=ctx.show_progress)
        return model, encoded

    return ctx.shared("uhd-model", make)


def _uhd(ctx: SystemContext, variant: str) -> Retriever:
    from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
    from uhdsearch.search.searcher import Searcher

    model, encoded = _uhd_model(ctx)
    klass = BinaryIndex if variant == "binary" else WeightedIndex
    index = klass.from_encoding(encoded, [d.doc_id for d in ctx.documents], None, model.digest())
    return Searcher(model, index, variant)


register("uhd-binary")(lambda ctx: _uhd(ctx, "binary"))
register("uhd-weighted")(lambda ctx: _uhd(ctx, "weighted"))


def _hybrid(ctx: SystemContext, first: str, second: str, name: str, method: str = "linear") -> Retriever:
    """Luan's hybrid: weight tuned on dev queries when the collection has a train split, else 0.5."""
    a, b = ctx.system(first), ctx.system(second)
    dev = ctx.dev()
    if method == "rrf":
        ctx.notes.setdefault("hybrids", {})[name] = {"method": "rrf", "rrf_k": 60}
        return HybridRetriever(a, b, method="rrf", name=name)
    if dev is None:
        logger.warning("%s: no train split to tune on; weight 0.5", name)
        hybrid = HybridRetriever(a, b, weight=0.5, name=name)
        tuned_on = "none (default 0.5)"
    else:
        hybrid = HybridRetriever.tune(a, b, dev[0], dev[1], name=name)
        tuned_on = f"{len(dev[0])} train-split queries (nDCG@10)"
    ctx.notes.setdefault("hybrids", {})[name] = {"method": "linear", "weight": hybrid.weight, "first": first,
                                                 "normalization": hybrid.normalization, "depth": hybrid.depth,
                                                 "tuned_on": tuned_on}
    return hybrid


register("hybrid-uhd-bm25")(lambda ctx: _hybrid(ctx, "uhd-binary", "bm25", "hybrid-uhd-bm25"))
register("hybrid-dense-bm25")(lambda ctx: _hybrid(ctx, "dense", "bm25", "hybrid-dense-bm25"))
register("rrf-uhd-bm25")(lambda ctx: _hybrid(ctx, "uhd-binary", "bm25", "rrf-uhd-bm25", "rrf"))


# The dense family (DE-k, ME-m, sum-of-max, whitening, flows) from uhdsearch.baselines.dense_systems.
# These fit unsupervised post-processing (whitening, flows, WTA centering) on the source corpus.
FIT_ON_SOURCE = frozenset({"dense+whiten-seq", "dense+whiten-tok", "dense+nice", "dense+glow",
                           "sum-of-max+whiten", "sum-of-max+nice", "sum-of-max+glow",
                           "uhd-binary-untrained", "uhd-binary+whiten"})


def _dense_family(name: str, builder: Callable[..., Any]) -> Builder:
    def build(ctx: SystemContext) -> Retriever:
        common = {"max_length": ctx.max_length, "show_progress": ctx.show_progress}
        options = {"first_stage": ctx.system(BASELINE)} if name.startswith("sum-of-max") else {}
        source = (f"{ctx.source_name} ({'evaluated' if ctx.in_domain else 'source'} corpus, "
                  f"{len(ctx.train_documents):,} documents)")
        notes = ctx.notes.setdefault("dense_family", {})
        if name in FIT_ON_SOURCE:
            options["fit_states"] = ctx.source_states()
            notes[name] = {"fit_on": source}
        train = ctx.train_data
        if name.startswith(("de-", "me-")):
            labelled = f"{ctx.source_name}/train qrels + " if train else ""
            notes[name] = {"trained_on": f"{labelled}ICT pairs of {source}"}
            if not ctx.in_domain:  # train the head on the source, then only index the target with it
                trained = builder(ctx.train_documents, train.queries if train else None,
                                  train.qrels if train else None, ctx.backbone, ctx.source_states(), **common)
                options["head"] = trained.embed_query
        if not ctx.in_domain:
            train = None
        return builder(ctx.data.corpus, train.queries if train else None, train.qrels if train else None,
                       ctx.backbone, ctx.document_states(), **common, **options)

    return build


def _register_dense_family() -> None:
    try:
        from uhdsearch.baselines.dense_systems import BUILDERS
    except ImportError:  # the module is optional while it is being written
        return
    for name, builder in BUILDERS.items():
        if name == "uhd-binary":  # theirs is the untrained centred head (the pair for uhd-binary+whiten)
            name = "uhd-binary-untrained"
        SYSTEMS.setdefault(name, _dense_family(name, builder))


_register_dense_family()


# ------------------------------------------------------------------ the comparison
@dataclass
class ComparisonReport:
    """What `run_comparison` returns.

    Attributes:
        results: The JSON written to `out_path` (dataset, split, systems -> measures, p_values, seconds, config).
        comparison: Scores, p-values against BM25, per-query values and runs.
        systems: name -> the built retriever.
    """

    results: dict[str, Any]
    comparison: Comparison
    systems: dict[str, Retriever] = field(repr=False)

    def format_table(self) -> str:
        """The significance table plus one line of build / search seconds per system."""
        seconds = self.results["seconds"]
        lines = [self.comparison.format_table(), "", "seconds: build (own work) / search (all test queries)"]
        lines += [f"  {n:24s} {s['build']:9.1f} {s['search']:9.1f}" for n, s in seconds.items()]
        lines += [f"  shared: {k} {v:.1f}" for k, v in self.results["shared_seconds"].items()]
        return "\n".join(lines)


def resolve_systems(names: str | Sequence[str] | None) -> list[str]:
    """Check system names (comma-separated or a list; None or "all": every registered one), BM25 first.

    Raises:
        ValueError: an unknown name (the message lists the known ones) or an empty list.
    """
    if names is None or names == "all":
        chosen = list(SYSTEMS)
    else:
        chosen = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    if not chosen:
        raise ValueError(f"no systems given; choose from: {', '.join(SYSTEMS)}")
    unknown = [n for n in chosen if n not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system(s) {', '.join(map(repr, unknown))}; known: {', '.join(SYSTEMS)}")
    return [BASELINE] + [n for n in dict.fromkeys(chosen) if n != BASELINE]


def run_comparison(
    data_dir: str | os.PathLike | None = None,
    systems: str | Sequence[str] | None = None,
    train_data_dir: str | os.PathLike | None = None,
    split: str = "test",
    fast: bool = False,
    backbone: str | os.PathLike | None = None,
    recipe: Any = None,
    max_length: int = 256,
    k: int = 1000,
    measures: Sequence[str] = DEFAULT_MEASURES,
    out_path: str | os.PathLike | None = None,
    overwrite: bool = False,
    show_progress: bool = True,
) -> ComparisonReport:
    """Build or train each system on one collection, search its `split`, compare with BM25, write JSON.

    Args:
        data_dir: BEIR-layout collection (default: the bundled SciFact).
        systems: Names from `SYSTEMS` (comma-separated or a list); None or "all" for every one. BM25, the
            baseline of the paired t-tests, is always included.
        train_data_dir: Out-of-domain training (Jung et al. Table 3): UHD and the DE/ME heads train on this
            collection's corpus and train split, and whitening, flows and WTA centering are fit on its whole
            corpus; the evaluated collection is only indexed and searched. ``config["dense_family"]`` records
            what each dense-family system was trained or fit on. Default: the evaluated collection's own train
            split when it has one, else ICT pairs of its corpus.
        split: The qrels split to evaluate on.
        fast: The quickstart's fast UHD recipe (small head, one minute of training).
        backbone: Local backbone directory (default: the bundled MiniLM); also the wordpiece tokenizer of
            BM25-uni/bi.
        recipe: A `uhdsearch.quickstart.Recipe` for UHD (overrides `fast`).
        max_length: Document token limit of the neural systems.
        k: Result depth per query.
        measures: ir_measures names.
        out_path: Where to write the results JSON (e.g. ``benchmarks/results/baselines_scifact.json``); None: nowhere.
        overwrite: Replace an existing `out_path`.
        show_progress: tqdm bars on stderr.

    Returns:
        A ComparisonReport; ``results`` is ``{"dataset", "split", "systems": {name: {measure: value}},
        "baseline", "p_values", "seconds": {name: {"build", "search"}}, "shared_seconds", "config"}``.

    Raises:
        ValueError: an unknown system name or k <= 0.
        FileExistsError: `out_path` exists and not `overwrite`.
        FileNotFoundError: a missing collection or split.
    """
    names = resolve_systems(systems)
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise ValueError(f"k={k!r} must be a positive integer")
    if out_path is not None and Path(out_path).exists() and not overwrite:
        raise FileExistsError(f"{out_path} already exists; pass overwrite=True (CLI: --overwrite) to replace it")
    data_dir = Path(data_dir) if data_dir is not None else bundled_dataset_dir("scifact")
    data = load_beir(data_dir, split)
    in_domain = train_data_dir is None or Path(train_data_dir).resolve() == data_dir.resolve()
    source = data_dir if in_domain else Path(train_data_dir)
    train_data = load_beir(source, "train") if (source / "qrels" / "train.tsv").is_file() else None
    if in_domain:
        train_documents = list(data.corpus.values())
    else:
        from uhdsearch.evaluation.datasets import load_corpus

        if not source.is_dir():
            raise FileNotFoundError(f"training data directory not found: {source}")
        train_documents = list((train_data.corpus if train_data else load_corpus(source / "corpus.jsonl")).values())
    ctx = SystemContext(data, train_data, train_documents, in_domain, backbone, fast, recipe, max_length, k,
                        show_progress, source_name=source.name)

    runs: dict[str, Run] = {}
    search_seconds: dict[str, float] = {}
    built: dict[str, Retriever] = {}
    for name in names:
        built[name] = ctx.system(name)
        start = time.perf_counter()
        runs[name] = built[name].search(data.queries, k)
        search_seconds[name] = time.perf_counter() - start
        logger.info("%s: built in %.1f s, searched in %.1f s", name, ctx.build_seconds[name], search_seconds[name])
    comparison = compare(runs, data.queries, data.qrels, measures, baseline=BASELINE, k=k)
    results = {
        "dataset": data.name,
        "split": split,
        "n_queries": comparison.n_queries,
        "systems": {n: {m: round(v, 4) for m, v in comparison.scores[n].items()} for n in names},
        "baseline": BASELINE,
        "p_values": {n: {m: (None if math.isnan(p) else p) for m, p in by.items()}
                     for n, by in comparison.p_values.items()},
        "seconds": {n: {"build": round(ctx.build_seconds.get(n, 0.0), 2), "search": round(search_seconds[n], 2)}
                    for n in names},
        "shared_seconds": {key: round(v, 2) for key, v in ctx.shared_seconds.items()},
        "config": {
            "train_data": str(source) if not in_domain else (f"{data.name}/train" if train_data else "ICT pairs"),
            "in_domain": in_domain, "fast": fast, "backbone": str(backbone or "all-MiniLM-L6-v2"),
            "max_length": max_length, "k": k, "n_documents": len(ctx.documents), **ctx.notes,
        },
    }
    if out_path is not None:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        write_json(out_path, results)
    return ComparisonReport(results, comparison, built)
