"""Searcher(encoder, index): drop empty queries -> encode once -> query_k -> score -> top-k -> Run.

A Searcher binds one query encoder to one index and checks them once; the search settings (SearchOptions,
search/options.py) may change per call, and what it derives from the index (search/index_facts.py) is built once.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from tqdm.auto import tqdm

from uhdsearch.encoder.query import QueryEncoder
from uhdsearch.errors import DimensionMismatchError, UsageError
from uhdsearch.index.base import Scoring, SearchableIndex, hits_per_query
from uhdsearch.search.cascade import Cascade, cascade_search
from uhdsearch.search.index_facts import IndexFacts
from uhdsearch.search.options import ResolvedOptions, SearchOptions
from uhdsearch.search.stopdims import AUTO, QueryWeighting
from uhdsearch.topk import tie_order
from uhdsearch.sparse import SparseEncoding
from uhdsearch.types import Query, Run, ScoredDoc, as_queries, start_run

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = 10_000  # longer input is cut before tokenizing; the model sees 32 tokens anyway
MAX_PLANS = 64  # resolved option sets kept per Searcher (a server's requests may vary their bucket weights)


@dataclass(frozen=True)
class _Plan:
    """One SearchOptions resolved for this Searcher's index, with its query weighting built."""

    resolved: ResolvedOptions
    weighting: QueryWeighting | None
    rank_idf: list[np.ndarray] | None  # query_selection="value-idf"


class Searcher:
    """The UHD `Retriever`: full ranking and re-ranking with a query encoder over a SearchableIndex.

    `search(queries, k) -> Run` is the `uhdsearch.types.Retriever` protocol every system shares (BM25Retriever,
    DenseRetriever, ...), so a Searcher goes wherever they go (`compare`, `HybridRetriever`, teachers).

    The keyword arguments are the default SearchOptions of `search` and `rerank` (search/options.py documents
    each one, its default and its range); `options=` gives them as one SearchOptions instead, and each call may
    pass its own.

    Args:
        encoder: a query encoder (`config`, `digest()`, `encode(texts, "query")`): a UHDEncoder, a lookup table,
            a query student.
        index: a SearchableIndex of the same dim and buckets.
        document_frequencies: the index's per-bucket document frequencies, when the caller already read them.

    Examples:
        >>> from uhdsearch.encoder.config import EncoderConfig
        >>> from uhdsearch.encoder.model import UHDEncoder
        >>> from uhdsearch.index.inverted import BinaryIndex
        >>> model = UHDEncoder.new(config=EncoderConfig(dim=1024, wta_k=8, query_k=None))
        >>> texts = ["vitamin d and bone density", "the mouse genome", "heart failure after surgery"]
        >>> index = BinaryIndex.from_encoding(model.encode_document(texts, show_progress=False),
        ...                                   ["d1", "d2", "d3"], None, model.digest())
        >>> searcher = Searcher(model, index)
        >>> searcher.search({"q1": "vitamin d and bone density"}, k=2)["q1"][0].doc_id
        'd1'
        >>> searcher.search({"q1": "the mouse genome"}, k=1, options=SearchOptions.paper())["q1"][0].doc_id
        'd2'
    """

    def __init__(
        self,
        encoder: QueryEncoder,
        index: SearchableIndex,
        scoring: Scoring | None = None,
        query_k: int | None = None,
        bucket_weights: Sequence[float] | None = None,
        name: str | None = None,
        query_selection: Literal["value", "value-idf"] = "value",
        max_df: float | str | None = AUTO,
        idf: bool = False,
        bucket_predictor=None,
        document_frequencies: list[np.ndarray] | None = None,
        cascade: Cascade | str | None = AUTO,
        length_norm: float | str | None = AUTO,
        *,
        options: SearchOptions | None = None,
    ) -> None:
        config = encoder.config
        # Checked here, once, with the encoder named: the index's own checks only see encoded queries.
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
        self.facts = IndexFacts(index, document_frequencies)
        if options is None:
            options = SearchOptions(scoring, query_k, query_selection,
                                    None if bucket_weights is None else tuple(bucket_weights), max_df, idf, cascade,
                                    length_norm, bucket_predictor, name)
        self.options = options
        self._plans: OrderedDict = OrderedDict()
        self._plans_lock = threading.Lock()
        default = self.resolve(options)  # the default options are checked now, not on the first search
        self.scoring, self.query_k, self.query_selection = default.scoring, default.query_k, options.query_selection
        self.max_df, self.cascade, self.length_norm = default.max_df, default.cascade, default.length_norm
        self.bucket_weights, self.bucket_predictor, self.name = default.bucket_weights, options.bucket_predictor, \
            default.name

    @property
    def weighting(self) -> QueryWeighting | None:
        """The default options' query weighting (stop dimensions, IDF), or None."""
        return self._plan(None).weighting

    def resolve(self, options: SearchOptions | None = None) -> ResolvedOptions:
        """`options` (default: this Searcher's) with every "auto" decided for this index."""
        return self._plan(options).resolved

    def _plan(self, options: SearchOptions | None) -> _Plan:
        options = self.options if options is None else options
        if not isinstance(options, SearchOptions):
            raise UsageError(f"options must be a SearchOptions, got {type(options).__name__}")
        key = (options.replace(bucket_predictor=None), id(options.bucket_predictor))  # a predictor is unhashable
        with self._plans_lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
                return plan
        resolved = options.resolve(self.index, self.encoder.config)
        weighting = QueryWeighting(self.facts.document_frequencies, int(self.index.n_documents), resolved.max_df,
                                   resolved.idf) if resolved.weighs_queries else None
        rank_idf = self.facts.rank_idf if options.query_selection == "value-idf" else None
        plan = _Plan(resolved, weighting, rank_idf)
        with self._plans_lock:
            self._plans[key] = plan
            if len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)
        return plan

    def warm_up(self, options: SearchOptions | None = None) -> None:
        """Prepare what later searches would otherwise build on their way: the index's pages and document lengths
        (index.warm_up), and the cascade's doc-major rows (index.keep_forward) when these options cascade."""
        cascade = self.resolve(options).cascade
        self.index.warm_up()
        if cascade is not None and cascade.forward:
            self.index.keep_forward(cascade.first_max_df)

    def encode(self, queries: Sequence[Query], options: SearchOptions | None = None) -> SparseEncoding:
        """Encode query texts once, keep `query_k` dims per bucket; one warning for the queries that were cut."""
        return self._encode(queries, self._plan(options))

    def _encode(self, queries: Sequence[Query], plan: _Plan) -> SparseEncoding:
        texts = [q.text[:MAX_QUERY_CHARS] for q in queries]
        encoded = self.encoder.encode(texts, "query")
        cut = np.array([len(q.text) > MAX_QUERY_CHARS for q in queries], dtype=bool)
        if encoded.truncated is not None:
            cut |= encoded.truncated
        if cut.any():
            logger.warning("%d queries are longer than %d tokens and were truncated", int(cut.sum()),
                           self.encoder.config.query_max_length)
        resolved, weighting = plan.resolved, plan.weighting
        if weighting is None:
            return encoded.truncate(resolved.query_k, plan.rank_idf)
        encoded = weighting.drop(encoded).truncate(resolved.query_k, plan.rank_idf)
        if not weighting.idf:
            return encoded
        if resolved.kernel_scoring == "quantized":
            return weighting.quantize(encoded)
        return weighting.scale(encoded)

    def search(
        self, queries: Mapping[str, str] | Sequence[Query], k: int = 1000, show_progress: bool = False,
        options: SearchOptions | None = None,
    ) -> Run:
        """Rank the whole index for each query (with `options`, default: this Searcher's).

        Empty queries get an empty result (one warning per call) and are never encoded; over-long ones are
        truncated (one warning per call).

        Raises:
            ValueError: k <= 0.
        """
        plan = self._plan(options)
        run, live = start_run(queries, k, plan.resolved.name)
        if not live:
            return run
        encoded = self._encode(live, plan)
        doc_ids = self.index.doc_ids
        batch = 256  # bounds result memory and lets the progress bar move
        for start in tqdm(range(0, len(live), batch), desc="search", disable=not show_progress, leave=False):
            part = live[start:start + batch]
            numbers, scores = self._search_encoded(encoded[start:start + len(part)], k, plan.resolved)
            for query, hits in zip(part, hits_per_query(numbers, scores, doc_ids)):
                run.results[query.query_id] = [ScoredDoc(d, s) for d, s in hits]
        return run

    def _search_encoded(self, encoded: SparseEncoding, k: int, resolved: ResolvedOptions
                        ) -> tuple[np.ndarray, np.ndarray]:
        scoring, weights = resolved.kernel_scoring, resolved.bucket_weights
        if resolved.cascade is not None:
            return cascade_search(self.index, encoded, self.facts.document_frequencies, k, weights, scoring,
                                  resolved.cascade, length_norm=resolved.length_norm)
        predictor = resolved.bucket_predictor
        if predictor is None:
            return self.index.search_encoded(encoded, k, weights, scoring, length_norm=resolved.length_norm)
        choice = predictor.choose(predictor.features(encoded, self.index, scoring))
        numbers = scores = None
        for row in np.unique(choice):  # one search per weight vector in use, over its queries
            rows = np.flatnonzero(choice == row)
            found, values = self.index.search_encoded(encoded[rows], k, tuple(predictor.grid[row]), scoring)
            if numbers is None:  # the kernels' own shapes and dtypes
                numbers = np.full((choice.shape[0],) + found.shape[1:], -1, dtype=found.dtype)
                scores = np.zeros((choice.shape[0],) + values.shape[1:], dtype=values.dtype)
            numbers[rows], scores[rows] = found, values
        return numbers, scores

    def rerank(self, queries: Mapping[str, str] | Sequence[Query], candidates: Run, k: int = 1000,
               options: SearchOptions | None = None) -> Run:
        """Re-rank each query's candidate documents (e.g. BM25's top 1000) by UHD score (with `options`).

        Only the candidates are scored. Candidates that share no active dimension score 0 and keep their
        relative order at the end.

        Raises:
            ValueError: k <= 0, or a candidate doc_id that is not in the index.
        """
        plan = self._plan(options)
        if plan.resolved.bucket_predictor is not None:
            raise UsageError("rerank scores with fixed bucket weights; search without a bucket_predictor")
        run, live = start_run(queries, k, f"{plan.resolved.name}-rerank")
        number = self.facts.doc_numbers
        pools = {}
        for query in as_queries(queries):
            pool = [h.doc_id for h in candidates.results.get(query.query_id, [])]
            unknown = [d for d in pool if d not in number]
            if unknown:
                raise UsageError(f"query {query.query_id}: candidate doc_ids not in the index, e.g. {unknown[:3]}")
            pools[query.query_id] = pool
        live = [q for q in live if pools[q.query_id]]
        if not live:
            return run
        encoded = self._encode(live, plan)
        for row, query in enumerate(live):
            pool = pools[query.query_id]
            pool_numbers = np.array([number[d] for d in pool], dtype=np.int64)
            pool_scores = self._candidate_scores(encoded[row:row + 1], pool_numbers, plan.resolved)
            order = tie_order(pool_scores, np.arange(len(pool)))[:k]  # ties keep the candidates' order
            run.results[query.query_id] = [ScoredDoc(pool[i], float(pool_scores[i])) for i in order]
        return run

    def _candidate_scores(self, query: SparseEncoding, numbers: np.ndarray,
                          resolved: ResolvedOptions | None = None) -> np.ndarray:
        """(len(numbers),) float64 Eq. 7 scores of one query against the given documents; <= 0 counts as 0."""
        resolved = resolved or self.resolve()
        if resolved.kernel_scoring != "binary" or not self.index.has_document_vectors:
            # Float sums in another order than the kernels' could split near-ties differently from search(),
            # so weighted scores come from the kernels themselves; binary overlaps are exact integers either way.
            return self._candidate_scores_by_search(query, numbers, resolved)
        documents = self.facts.binary_vectors
        query = query.binarize()
        total = np.zeros(numbers.shape[0])
        alpha = resolved.length_norm
        scales = self.index.length_scales(alpha) if alpha else None
        # Per-bucket overlaps are exact integers; weighted by bucket (and scaled by the document's length factor)
        # and summed in bucket order from 0.0 in float64, as the kernels sum them.
        for b, (weight, q, vectors) in enumerate(zip(resolved.bucket_weights, query.buckets, documents.buckets)):
            if weight == 0 or q.nnz == 0:
                continue
            products = (q.astype(np.float64) @ vectors[numbers].astype(np.float64).T).toarray().ravel()
            total += weight * products if scales is None else (weight * products) * scales[b][0][numbers]
        return np.where(total > 0, total, 0.0)  # the index returns positive scores only

    def _candidate_scores_by_search(self, query: SparseEncoding, numbers: np.ndarray,
                                    resolved: ResolvedOptions | None = None) -> np.ndarray:
        resolved = resolved or self.resolve()
        # The kernels with every other document masked out: weighted scoring, and indexes without
        # document_vectors (SegmentedIndex).
        outside = np.ones(len(self.index.doc_ids), dtype=bool)  # doc numbers, deleted ones included
        outside[numbers] = False
        found, scores = self.index.search_encoded(query, len(numbers), resolved.bucket_weights,
                                                  resolved.kernel_scoring, deleted=outside,
                                                  length_norm=resolved.length_norm)
        hits = found[0] >= 0
        score_of = dict(zip(found[0, hits].tolist(), scores[0, hits].tolist()))
        return np.array([score_of.get(int(n), 0.0) for n in numbers])

    def latency_ms(self, queries: Sequence[Query], k: int = 10, options: SearchOptions | None = None) -> float:
        """Median milliseconds per query for encode + search, one query at a time (Table 3's setting)."""
        times = []
        previous = logger.level
        logger.setLevel(logging.ERROR)  # one truncation warning per timed query would flood the log
        try:
            for q in queries:
                start = time.perf_counter()
                self.search([q], k=k, options=options)
                times.append((time.perf_counter() - start) * 1000)
        finally:
            logger.setLevel(previous)
        return float(np.median(times)) if times else float("nan")
