"""Searcher(encoder, index): encode -> query_k truncation -> score -> top-k -> Run."""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from tqdm.auto import tqdm

from uhdsearch.errors import DimensionMismatchError
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.index.base import Scoring
from uhdsearch.sparse import SparseEncoding
from uhdsearch.types import Query, Run, ScoredDoc, as_queries

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = 10_000  # longer input is cut before tokenizing; the model sees 32 tokens anyway


class Searcher:
    """Full ranking and re-ranking with a UHD encoder over an inverted index.

    Example:
        >>> # run = Searcher(model, index).search({"q1": "vitamin d and bone density"}, k=10)
    """

    def __init__(
        self,
        encoder,
        index: InvertedIndex,
        scoring: Scoring | None = None,
        query_k: int | None | Literal["config"] = "config",
        bucket_weights: Sequence[float] | None = None,
        name: str | None = None,
        query_selection: Literal["value", "value-idf"] = "value",
    ) -> None:
        config = encoder.config
        if config.dim != index.dim:
            raise DimensionMismatchError(
                f"the encoder has dim={config.dim} but the index has dim={index.dim}; "
                "search an index built with this encoder"
            )
        if config.n_buckets != index.n_buckets:
            raise DimensionMismatchError(
                f"the encoder has {config.n_buckets} buckets but the index has {index.n_buckets}"
            )
        if index.encoder_digest and index.encoder_digest != encoder.digest():
            logger.warning("index %s was built by encoder %s, but this encoder is %s; scores may be meaningless",
                           index.path, index.encoder_digest, encoder.digest())
        self.encoder = encoder
        self.index = index
        self.scoring: Scoring = scoring or index.variant
        if self.scoring not in ("binary", "weighted"):
            raise ValueError(f"scoring={self.scoring!r}; choose 'binary' or 'weighted'")
        if self.scoring == "weighted" and index.variant != "weighted":
            raise ValueError("weighted scoring needs a weighted index; build one with WeightedIndex")
        self.query_k = query_k
        if query_selection not in ("value", "value-idf"):
            raise ValueError(f"query_selection={query_selection!r}; choose 'value' or 'value-idf'")
        self.query_selection = query_selection
        self._idf = None
        if query_selection == "value-idf":
            # Rank query dims by value x idf so that "stop dimensions" active in most documents go first.
            n = index.n_documents
            self._idf = [np.log((n + 1) / (index.document_frequencies(b) + 1)) for b in range(index.n_buckets)]
        weights = tuple(bucket_weights) if bucket_weights is not None else config.weights
        if len(weights) != index.n_buckets:
            raise ValueError(f"{len(weights)} bucket weights for {index.n_buckets} buckets")
        self.bucket_weights = weights
        self.name = name or f"uhd-{self.scoring}"

    def encode(self, queries: Sequence[Query]) -> SparseEncoding:
        texts = _clean_texts(queries, self.encoder.backbone.tokenizer, self.encoder.config.query_max_length)
        if self._idf is None:
            return self.encoder.encode_query(texts, query_k=self.query_k)
        top_k = self.encoder.config.query_k if self.query_k == "config" else self.query_k
        return self.encoder.encode_query(texts, query_k=None).truncate(top_k, self._idf)

    def search(
        self, queries: Mapping[str, str] | Sequence[Query], k: int = 1000, show_progress: bool = False
    ) -> Run:
        """Rank the whole index for each query.

        Empty queries get an empty result (one warning per call); over-long ones are truncated.

        Raises:
            ValueError: k <= 0.
        """
        _check_k(k)
        queries = as_queries(queries)
        run = Run(name=self.name)
        if not queries:
            return run
        encoded = self.encode(queries)
        doc_ids = self.index.doc_ids
        batch = 256  # bounds result memory and lets the progress bar move
        for start in tqdm(range(0, len(queries), batch), desc="search", disable=not show_progress, leave=False):
            part = queries[start:start + batch]
            numbers, scores = self.index.search_encoded(encoded[start:start + len(part)], k, self.bucket_weights,
                                                        self.scoring)
            for row, query in enumerate(part):
                if not query.text.strip():
                    run.results[query.query_id] = []
                    continue
                hits = numbers[row] >= 0
                run.results[query.query_id] = [ScoredDoc(doc_ids[d], float(s))
                                               for d, s in zip(numbers[row, hits], scores[row, hits])]
        return run

    def rerank(self, queries: Mapping[str, str] | Sequence[Query], candidates: Run, k: int = 1000) -> Run:
        """Re-rank each query's candidate documents (e.g. BM25's top 1000) by UHD score.

        Candidates that share no active dimension score 0 and keep their relative order at the end.
        """
        _check_k(k)
        queries = as_queries(queries)
        run = Run(name=f"{self.name}-rerank")
        if not queries:
            return run
        encoded = self.encode(queries)
        number = {d: i for i, d in enumerate(self.index.doc_ids)}
        n_numbers = len(self.index.doc_ids)  # doc numbers, deleted ones included (a segmented index keeps them)
        for row, query in enumerate(queries):
            pool = [h.doc_id for h in candidates.results.get(query.query_id, [])]
            unknown = [d for d in pool if d not in number]
            if unknown:
                raise ValueError(f"query {query.query_id}: candidate doc_ids not in the index, e.g. {unknown[:3]}")
            if not query.text.strip() or not pool:
                run.results[query.query_id] = []
                continue
            pool_numbers = np.array([number[d] for d in pool], dtype=np.int64)
            outside = np.ones(n_numbers, dtype=bool)
            outside[pool_numbers] = False  # score only the pool: everything else counts as deleted
            numbers, scores = self.index.search_encoded(encoded[row:row + 1], len(pool), self.bucket_weights,
                                                        self.scoring, deleted=outside)
            found = numbers[0] >= 0
            score_of = dict(zip(numbers[0, found].tolist(), scores[0, found].tolist()))
            pool_scores = np.array([score_of.get(int(n), 0.0) for n in pool_numbers])
            order = np.lexsort((np.arange(len(pool)), -pool_scores))[:k]  # stable: ties keep candidate order
            run.results[query.query_id] = [ScoredDoc(pool[i], float(pool_scores[i])) for i in order]
        return run

    def latency_ms(self, queries: Sequence[Query], k: int = 10) -> float:
        """Median milliseconds per query for encode + search, one query at a time (Table 3's setting)."""
        times = []
        previous = logger.level
        logger.setLevel(logging.ERROR)  # one truncation warning per timed query would flood the log
        try:
            for q in queries:
                start = time.perf_counter()
                self.search([q], k=k)
                times.append((time.perf_counter() - start) * 1000)
        finally:
            logger.setLevel(previous)
        return float(np.median(times)) if times else float("nan")


def _check_k(k: int) -> None:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k <= 0:
        raise ValueError(f"k={k!r} must be a positive integer")


def _clean_texts(queries: Sequence[Query], tokenizer, max_tokens: int) -> list[str]:
    texts, n_empty, n_long = [], 0, 0
    for q in queries:
        text = q.text
        if not text.strip():
            n_empty += 1
        if len(text) > MAX_QUERY_CHARS:
            text = text[:MAX_QUERY_CHARS]
            n_long += 1
        texts.append(text)
    if n_empty:
        logger.warning("%d empty or whitespace-only queries get empty results", n_empty)
    lengths = [len(ids) for ids in tokenizer(texts, truncation=False)["input_ids"]] if texts else []
    n_long += sum(1 for n in lengths if n > max_tokens)
    if n_long:
        logger.warning("%d queries are longer than %d tokens and were truncated", n_long, max_tokens)
    return texts
