"""What builders share: the data, settings and memoized expensive work (backbone, one pass over each corpus).

Out of domain (a training collection other than the evaluated one) every learned part learns from the source
collection alone, as in Jung et al. Table 3 ("evaluated on the target data using the models trained with the
source data"): UHD and the DE/ME heads train on its train split and corpus, and whitening, flows and UHD's
centering are fit on its corpus. The target corpus is only indexed and searched.
"""
from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from uhdsearch.errors import UsageError
from uhdsearch.evaluation.datasets import BeirData, bundled_dataset_dir, load_beir, load_corpus
from uhdsearch.experiments.registry import SYSTEMS
from uhdsearch.types import Document, Qrels, Query, Retriever, Run, as_queries

logger = logging.getLogger(__name__)

DEV_QUERIES = 200  # train-split queries the hybrid weights are tuned on


class SystemContext:
    """What builders share: the data, settings, and memoized expensive work, each timed once.

    Attributes:
        data: The evaluation split (corpus, queries, qrels).
        train_data: Labelled training split (the collection's own train split, or --train-data's), or None.
        train_documents: The source corpus that UHD and the DE/ME heads train on and whitening, flows and WTA
            centering are fit on (the evaluation corpus unless --train-data is given).
        in_domain: Whether training data comes from the evaluated collection.
        source_name: Name of the collection trained and fit on (the evaluated one in domain).
        source_dir: Its directory, when the context was loaded from one.
        backbone_dir: Local backbone directory (None: the bundled MiniLM).
        fast: Use the quickstart's fast UHD recipe.
        recipe: Explicit UHD recipe (overrides fast).
        uhd_model_dir: A trained UHD model to evaluate as it is (no training; overrides recipe and fast).
        search_options: The SearchOptions of the "uhd" system (None: SearchOptions.default()).
        max_length: Document token limit for every neural system.
        k: Result depth.
    """

    def __init__(self, data: BeirData, train_data: BeirData | None, train_documents: list[Document],
                 in_domain: bool, backbone_dir: str | os.PathLike | None = None, fast: bool = False,
                 recipe: Any = None, max_length: int = 256, k: int = 1000, show_progress: bool = True,
                 source_name: str | None = None, source_dir: str | os.PathLike | None = None,
                 uhd_model_dir: str | os.PathLike | None = None, search_options: Any = None) -> None:
        self.data, self.train_data, self.train_documents = data, train_data, train_documents
        self.source_name, self.source_dir = source_name or data.name, source_dir
        self.in_domain, self.backbone_dir, self.fast, self.recipe = in_domain, backbone_dir, fast, recipe
        self.max_length, self.k, self.show_progress = max_length, k, show_progress
        self.uhd_model_dir, self.search_options = uhd_model_dir, search_options
        self.documents = list(data.corpus.values())
        self.build_seconds: dict[str, float] = {}
        self.shared_seconds: dict[str, float] = {}
        self.notes: dict[str, Any] = {}
        self._shared: dict[str, Any] = {}
        self._systems: dict[str, Retriever] = {}
        self._frames: list[float] = []  # time spent in nested timed work, per open frame

    @classmethod
    def load(cls, data_dir: str | os.PathLike | None = None, train_data_dir: str | os.PathLike | None = None,
             split: str = "test", **settings: Any) -> SystemContext:
        """A context for evaluating `data_dir`'s `split`, trained and fit on `train_data_dir` if given.

        Args:
            data_dir: BEIR-layout collection (default: the bundled SciFact).
            train_data_dir: Out-of-domain training collection; None or the same directory: in domain (the
                collection's own train split when it has one, else ICT pairs of its corpus).
            split: The qrels split to evaluate on.
            settings: backbone_dir, fast, recipe, uhd_model_dir, max_length, k, show_progress,
                search_options (see the class).

        Raises:
            FileNotFoundError: a missing collection, split or training directory.
        """
        data_dir = Path(data_dir) if data_dir is not None else bundled_dataset_dir("scifact")
        data = load_beir(data_dir, split)
        in_domain = train_data_dir is None or Path(train_data_dir).resolve() == data_dir.resolve()
        source = data_dir if in_domain else Path(train_data_dir)
        train_data = load_beir(source, "train") if (source / "qrels" / "train.tsv").is_file() else None
        if in_domain:
            train_documents = list(data.corpus.values())
        else:
            if not source.is_dir():
                raise FileNotFoundError(f"training data directory not found: {source}")
            corpus = train_data.corpus if train_data else load_corpus(source / "corpus.jsonl")
            train_documents = list(corpus.values())
        return cls(data, train_data, train_documents, in_domain, source_name=source.name, source_dir=source,
                   **settings)

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
                raise UsageError(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")
            logger.info("building %s", name)
            built, self.build_seconds[name] = self._timed(lambda: SYSTEMS[name].build(self))
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

    def source_description(self) -> str:
        """What a fit or a training used, for the notes: "<name> (<evaluated|source> corpus, <n> documents)"."""
        return (f"{self.source_name} ({'evaluated' if self.in_domain else 'source'} corpus, "
                f"{len(self.train_documents):,} documents)")

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
    """A `Retriever` whose runs are memoized per (queries, k); a smaller k is cut from a larger cached run.

    Every uhdsearch retriever's top k is the head of its top K (fixed tie rule), so the cut is exact.

    Examples:
        >>> from uhdsearch.types import Run, ScoredDoc
        >>> class Ranked:
        ...     def search(self, queries, k):
        ...         return Run({q.query_id: [ScoredDoc(f"d{i}", -i) for i in range(k)] for q in queries})
        >>> cached = CachedRetriever(Ranked())
        >>> cached.search({"q": "text"}, 5).doc_ids("q")
        ['d0', 'd1', 'd2', 'd3', 'd4']
        >>> cached.search({"q": "text"}, 2).doc_ids("q")  # cut from the cached run of depth 5
        ['d0', 'd1']
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
