"""Searcher(encoder, index): drop empty queries -> encode once -> query_k -> score -> top-k -> Run."""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from tqdm.auto import tqdm

from uhdsearch.errors import DimensionMismatchError, UsageError
from uhdsearch.index.base import Scoring, SearchableIndex, hits_per_query
from uhdsearch.search.cascade import Cascade, cascade_search, resolve_cascade
from uhdsearch.search.lengthnorm import resolve_length_norm
from uhdsearch.search.stopdims import AUTO, QueryWeighting, resolve_max_df
from uhdsearch.topk import tie_order
from uhdsearch.sparse import SparseEncoding
from uhdsearch.types import Query, Run, ScoredDoc, as_queries, check_k, start_run

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = 10_000  # longer input is cut before tokenizing; the model sees 32 tokens anyway


class Searcher:
    """Full ranking and re-ranking with a UHD encoder over an inverted index.

    Args:
        query_k: top dimensions kept per query bucket (Table 4); None: the encoder config's query_k.
        max_df: drop query dims active in more than this fraction of the index's documents (stop dimensions),
            before query_k; None keeps them; "auto" (the default): 0.3 on indexes of 1,000 documents or more,
            none below (search/stopdims.py says how both were chosen), and none with a bucket predictor.
        document_frequencies: the index's per-bucket document frequencies, when the caller already read them (a
            service reuses them for every request on one index snapshot).
        idf: weight the query dims by IDF: binary scoring sums 4-bit IDF levels of the shared dims (exact, 1.0-1.3x
            the time of binary at 1M documents), weighted scoring multiplies the query values by the IDF.
        bucket_predictor: a BucketWeightPredictor (search/bucket_predictor.py, e.g. `.load(model_dir)`): search()
            picks each query's bucket weights with it instead of `bucket_weights`.
        cascade: a `Cascade` (search/cascade.py): the rare query dims choose candidates, the frequent ones are
            counted for those only; not exact. "auto" (the default): on indexes of 100,000 documents or more with
            binary scoring, `Cascade()` (0.1:100) for plain counts and 0.1:300 with length normalization; none
            below; None: exact search.
        length_norm: divide each bucket's binary count by the document's active dims ** length_norm
            (search/lengthnorm.py). "auto" (the default): 0.3 with binary scoring (not idf, not a bucket
            predictor), off otherwise; None or 0: plain counts, the paper's score.

    Example:
        >>> from uhdsearch.encoder.config import EncoderConfig
        >>> from uhdsearch.encoder.model import UHDEncoder
        >>> from uhdsearch.index.inverted import BinaryIndex
        >>> model = UHDEncoder.new(config=EncoderConfig(dim=1024, wta_k=8, query_k=None))
        >>> texts = ["vitamin d and bone density", "the mouse genome", "heart failure after surgery"]
        >>> index = BinaryIndex.from_encoding(model.encode_document(texts, show_progress=False),
        ...                                   ["d1", "d2", "d3"], None, model.digest())
        >>> run = Searcher(model, index).search({"q1": "vitamin d and bone density"}, k=2)
        >>> run["q1"][0].doc_id
        'd1'
    """

    def __init__(
        self,
        encoder,
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
        self.scoring: Scoring = scoring or index.variant
        if self.scoring not in ("binary", "weighted"):
            raise UsageError(f"scoring={self.scoring!r}; choose 'binary' or 'weighted'")
        if self.scoring == "weighted" and index.variant != "weighted":
            raise UsageError("weighted scoring needs a weighted index; build one with WeightedIndex")
        self.query_k = config.query_k if query_k is None else check_k(query_k, "query_k")
        if query_selection not in ("value", "value-idf"):
            raise UsageError(f"query_selection={query_selection!r}; choose 'value' or 'value-idf'")
        self.query_selection = query_selection
        self._idf = None
        if query_selection == "value-idf":
            # Rank query dims by value x idf so that "stop dimensions" active in most documents go first.
            n = index.n_documents
            self._idf = [np.log((n + 1) / (index.document_frequencies(b) + 1)) for b in range(index.n_buckets)]
        # document frequencies read once here (a segmented index sums them over its live documents)
        explicit = max_df if max_df != AUTO else None  # only an explicit threshold renames the run
        # "auto" keeps every dim with a bucket predictor (its features saw every dim) and on indexes that say
        # stop dimensions do not pay on them (impact planes: SciFact train 0.8021 with every dim, 0.7939 at 0.3)
        no_stop_dims = bucket_predictor is not None or not getattr(index, "stop_dimensions_by_default", True)
        max_df = resolve_max_df(None if (max_df == AUTO and no_stop_dims) else max_df, index.n_documents)
        self.max_df = max_df
        self._kernel_scoring: Scoring = "quantized" if (idf and self.scoring == "binary") else self.scoring
        if bucket_predictor is not None and cascade not in (AUTO, None):
            raise UsageError("a bucket predictor cannot be combined with the cascade (its weights differ per query)")
        self.length_norm = resolve_length_norm(length_norm, self._kernel_scoring, index, bucket_predictor)
        self.cascade = resolve_cascade(
            None if (cascade == AUTO and bucket_predictor is not None) else cascade, index.n_documents,
            self._kernel_scoring != "weighted" and hasattr(index, "overlap_counts") and bucket_predictor is None,
            self.length_norm)
        if document_frequencies is not None:
            if len(document_frequencies) != index.n_buckets or any(
                    np.shape(f) != (index.dim,) for f in document_frequencies):
                raise DimensionMismatchError(f"document_frequencies: give one ({index.dim},) array per bucket "
                                             f"({index.n_buckets})")
        elif max_df is not None or idf or self.cascade is not None:
            document_frequencies = [np.asarray(index.document_frequencies(b), np.int64)
                                    for b in range(index.n_buckets)]
        self._document_frequencies = document_frequencies
        self.weighting = None if (max_df is None and not idf) else QueryWeighting(
            document_frequencies, int(index.n_documents), max_df, idf)
        weights = tuple(float(w) for w in bucket_weights) if bucket_weights is not None else config.weights
        if not all(np.isfinite(weights)):
            raise UsageError(f"bucket_weights={list(weights)} must be finite numbers")
        if len(weights) != index.n_buckets:  # rerank scores without the index's search_encoded, which checks this
            raise UsageError(f"{len(weights)} bucket weights for {index.n_buckets} buckets")
        self.bucket_weights = weights
        if bucket_predictor is not None:
            if bucket_predictor.n_buckets != index.n_buckets:
                raise UsageError(f"the bucket predictor weighs {bucket_predictor.n_buckets} buckets; the index has "
                                 f"{index.n_buckets}")
            if self.weighting is not None:  # its features were computed on unweighted queries
                raise UsageError("a bucket predictor cannot be combined with max_df or idf query weighting")
            if bucket_predictor.scoring != self.scoring or self._kernel_scoring != self.scoring:
                raise UsageError(f"the bucket predictor was fitted for {bucket_predictor.scoring} scoring; this "
                                 f"searcher scores {self._kernel_scoring}")
        self.bucket_predictor = bucket_predictor
        named_norm = f"-ln{self.length_norm:g}" if length_norm not in (AUTO, None) and self.length_norm else ""
        named_cascade = f"-cascade{self.cascade.first_max_df:g}x{self.cascade.depth}" if cascade != AUTO and \
            self.cascade else ""
        self.name = name or (f"uhd-{self.scoring}" + ("-idf" if idf else "") + (f"-df{explicit:g}" if explicit else "")
                             + named_norm + named_cascade)
        self._documents: SparseEncoding | None = None  # the index's vectors, loaded by the first rerank

    def warm_up(self) -> None:
        """Prepare what later searches would otherwise build on their way: the index's pages and document lengths
        (index.warm_up), and the cascade's doc-major rows (index.keep_forward) when this searcher cascades."""
        if hasattr(self.index, "warm_up"):
            self.index.warm_up()
        if self.cascade is not None and self.cascade.forward and hasattr(self.index, "keep_forward"):
            self.index.keep_forward(self.cascade.first_max_df)

    def encode(self, queries: Sequence[Query]) -> SparseEncoding:
        """Encode query texts once, keep `query_k` dims per bucket; one warning for the queries that were cut."""
        texts = [q.text[:MAX_QUERY_CHARS] for q in queries]
        encoded = self.encoder.encode(texts, "query")
        cut = np.array([len(q.text) > MAX_QUERY_CHARS for q in queries], dtype=bool)
        if encoded.truncated is not None:
            cut |= encoded.truncated
        if cut.any():
            logger.warning("%d queries are longer than %d tokens and were truncated", int(cut.sum()),
                           self.encoder.config.query_max_length)
        if self.weighting is None:
            return encoded.truncate(self.query_k, self._idf)
        encoded = self.weighting.drop(encoded).truncate(self.query_k, self._idf)
        if not self.weighting.idf:
            return encoded
        if self._kernel_scoring == "quantized":
            return self.weighting.quantize(encoded)
        return self.weighting.scale(encoded)

    def search(
        self, queries: Mapping[str, str] | Sequence[Query], k: int = 1000, show_progress: bool = False
    ) -> Run:
        """Rank the whole index for each query.

        Empty queries get an empty result (one warning per call) and are never encoded; over-long ones are
        truncated (one warning per call).

        Raises:
            ValueError: k <= 0.
        """
        run, live = start_run(queries, k, self.name)
        if not live:
            return run
        encoded = self.encode(live)
        doc_ids = self.index.doc_ids
        batch = 256  # bounds result memory and lets the progress bar move
        for start in tqdm(range(0, len(live), batch), desc="search", disable=not show_progress, leave=False):
            part = live[start:start + batch]
            numbers, scores = self._search_encoded(encoded[start:start + len(part)], k)
            for query, hits in zip(part, hits_per_query(numbers, scores, doc_ids)):
                run.results[query.query_id] = [ScoredDoc(d, s) for d, s in hits]
        return run

    def _search_encoded(self, encoded: SparseEncoding, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.cascade is not None:
            return cascade_search(self.index, encoded, self._document_frequencies, k, self.bucket_weights,
                                  self._kernel_scoring, self.cascade, length_norm=self.length_norm)
        if self.bucket_predictor is None:
            return self.index.search_encoded(encoded, k, self.bucket_weights, self._kernel_scoring,
                                             length_norm=self.length_norm)
        predictor = self.bucket_predictor
        choice = predictor.choose(predictor.features(encoded, self.index, self._kernel_scoring))
        numbers = scores = None
        for row in np.unique(choice):  # one search per weight vector in use, over its queries
            rows = np.flatnonzero(choice == row)
            found, values = self.index.search_encoded(encoded[rows], k, tuple(predictor.grid[row]),
                                                      self._kernel_scoring)
            if numbers is None:  # the kernels' own shapes and dtypes
                numbers = np.full((choice.shape[0],) + found.shape[1:], -1, dtype=found.dtype)
                scores = np.zeros((choice.shape[0],) + values.shape[1:], dtype=values.dtype)
            numbers[rows], scores[rows] = found, values
        return numbers, scores

    def rerank(self, queries: Mapping[str, str] | Sequence[Query], candidates: Run, k: int = 1000) -> Run:
        """Re-rank each query's candidate documents (e.g. BM25's top 1000) by UHD score.

        Only the candidates are scored. Candidates that share no active dimension score 0 and keep their
        relative order at the end.

        Raises:
            ValueError: k <= 0, or a candidate doc_id that is not in the index.
        """
        if self.bucket_predictor is not None:
            raise UsageError("rerank scores with fixed bucket weights; make a Searcher without bucket_predictor")
        run, live = start_run(queries, k, f"{self.name}-rerank")
        number = {d: i for i, d in enumerate(self.index.doc_ids)}
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
        encoded = self.encode(live)
        for row, query in enumerate(live):
            pool = pools[query.query_id]
            pool_numbers = np.array([number[d] for d in pool], dtype=np.int64)
            pool_scores = self._candidate_scores(encoded[row:row + 1], pool_numbers)
            order = tie_order(pool_scores, np.arange(len(pool)))[:k]  # ties keep the candidates' order
            run.results[query.query_id] = [ScoredDoc(pool[i], float(pool_scores[i])) for i in order]
        return run

    def _candidate_scores(self, query: SparseEncoding, numbers: np.ndarray) -> np.ndarray:
        """(len(numbers),) float64 Eq. 7 scores of one query against the given documents; <= 0 counts as 0."""
        if self._kernel_scoring != "binary" or not hasattr(self.index, "document_vectors"):
            # Float sums in another order than the kernels' could split near-ties differently from search(),
            # so weighted scores come from the kernels themselves; binary overlaps are exact integers either way.
            return self._candidate_scores_by_search(query, numbers)
        if self._documents is None:
            self._documents = self.index.document_vectors().binarize()
        query = query.binarize()
        total = np.zeros(numbers.shape[0])
        scales = self.index.length_scales(self.length_norm) if self.length_norm else None
        # Per-bucket overlaps are exact integers; weighted by bucket (and scaled by the document's length factor)
        # and summed in bucket order from 0.0 in float64, as the kernels sum them.
        for b, (weight, q, documents) in enumerate(zip(self.bucket_weights, query.buckets, self._documents.buckets)):
            if weight == 0 or q.nnz == 0:
                continue
            products = (q.astype(np.float64) @ documents[numbers].astype(np.float64).T).toarray().ravel()
            total += weight * products if scales is None else (weight * products) * scales[b][0][numbers]
        return np.where(total > 0, total, 0.0)  # the index returns positive scores only

    def _candidate_scores_by_search(self, query: SparseEncoding, numbers: np.ndarray) -> np.ndarray:
        # The kernels with every other document masked out: weighted scoring, and indexes without
        # document_vectors (SegmentedIndex).
        outside = np.ones(len(self.index.doc_ids), dtype=bool)  # doc numbers, deleted ones included
        outside[numbers] = False
        found, scores = self.index.search_encoded(query, len(numbers), self.bucket_weights, self._kernel_scoring,
                                                  deleted=outside, length_norm=self.length_norm)
        hits = found[0] >= 0
        score_of = dict(zip(found[0, hits].tolist(), scores[0, hits].tolist()))
        return np.array([score_of.get(int(n), 0.0) for n in numbers])

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
