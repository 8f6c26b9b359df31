"""Fusion of any two retrievers: a linear score combination (Luan et al. §6.1, §8) and reciprocal rank fusion.

Linear: each system retrieves its top `depth` (at least k) documents; every document in the union is scored
``weight * s_a + (1 - weight) * s_b``, a system that did not retrieve it counting 0 (Luan's footnote 11).

Scores are min-max normalized per query over each system's own list by default (the worst retrieved document
gets 0, the best 1). Luan combine raw scores; here the parts live on unrelated scales (BM25 sums of idf
weights that grow with query length, cosines in [-1, 1], UHD overlap counts in the hundreds), so a single
raw-score weight would mean something different for every query and pair of systems. ``normalization="none"``
gives Luan's raw combination.

Ties: score descending, then the rank in the system with the larger weight (then the other's), so weight 1
(or 0) returns exactly the first (or second) system's top k. Reciprocal rank fusion is the
parameter-light alternative: sum over systems of 1 / (rrf_k + rank), equal to ``ranx.fuse(method="rrf")``.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from uhdsearch.errors import UsageError
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.types import Qrels, Query, Retriever, Run, ScoredDoc, as_queries, check_k, start_run

logger = logging.getLogger(__name__)

Normalization = Literal["min-max", "none"]
Method = Literal["linear", "rrf"]
DEFAULT_GRID = tuple(round(x, 2) for x in np.linspace(0.0, 1.0, 11))


def fuse_linear(
    run_a: Run, run_b: Run, weight: float, k: int, normalization: Normalization = "min-max", name: str = "hybrid"
) -> Run:
    """Combine two runs' scores: ``weight * s_a + (1 - weight) * s_b`` over the union of their documents.

    Args:
        run_a: First system's ranked lists (its top-n per query).
        run_b: Second system's ranked lists.
        weight: lambda in [0, 1], the first system's share.
        k: Documents kept per query.
        normalization: ``"min-max"`` per query and system, or ``"none"`` (raw scores, as Luan et al.).
        name: The returned Run's name.

    Returns:
        A Run over the queries of `run_a` then those only in `run_b`; a missing score counts 0.

    Raises:
        ValueError: weight outside [0, 1], k <= 0, or an unknown normalization.

    Examples:
        >>> a = Run({"q": [ScoredDoc("d1", 9.0), ScoredDoc("d2", 5.0), ScoredDoc("d3", 1.0)]})
        >>> b = Run({"q": [ScoredDoc("d3", 0.9), ScoredDoc("d4", 0.1)]})
        >>> [(h.doc_id, round(h.score, 3)) for h in fuse_linear(a, b, 0.5, k=3)["q"]]
        [('d1', 0.5), ('d3', 0.5), ('d2', 0.25)]
    """
    check_k(k)
    if not 0.0 <= weight <= 1.0 or math.isnan(weight):
        raise UsageError(f"weight={weight} must be between 0 and 1 (the first system's share)")
    if normalization not in ("min-max", "none"):
        raise UsageError(f"normalization={normalization!r}; choose 'min-max' or 'none'")
    first, second = (0, 1) if weight >= 0.5 else (1, 0)  # ties go to the heavier system's ranking
    out = Run(name=name)
    for query_id in list(run_a.results) + [q for q in run_b.results if q not in run_a.results]:
        parts = [_normalized(run.results.get(query_id, []), normalization) for run in (run_a, run_b)]
        ranks = [{doc: r for r, (doc, _) in enumerate(p)} for p in parts]
        scores = [dict(p) for p in parts]
        docs = list(dict.fromkeys([d for d, _ in parts[0]] + [d for d, _ in parts[1]]))
        fused = {d: weight * scores[0].get(d, 0.0) + (1.0 - weight) * scores[1].get(d, 0.0) for d in docs}
        missing = len(docs)
        docs.sort(key=lambda d: (-fused[d], ranks[first].get(d, missing), ranks[second].get(d, missing)))
        out.results[query_id] = [ScoredDoc(d, float(fused[d])) for d in docs[:k]]
    return out


def fuse_rrf(run_a: Run, run_b: Run, k: int, rrf_k: int = 60, name: str = "rrf") -> Run:
    """Reciprocal rank fusion: sum over the runs of 1 / (rrf_k + rank), rank from 1, as ``ranx.fuse(method="rrf")``.

    Each run's own order (its tie rule) decides its ranks. Ties in the fused score: the first run's rank,
    then the second's. Written out rather than called through ranx: ranx's numba kernels compile for
    minutes on a busy 2-core machine at every start; the tests check equality with ranx.

    Args:
        run_a: First system's ranked lists.
        run_b: Second system's ranked lists.
        k: Documents kept per query.
        rrf_k: RRF's constant (60 in Cormack et al. and ranx).
        name: The returned Run's name.

    Returns:
        A Run over the queries of either input.

    Raises:
        ValueError: k <= 0 or rrf_k < 0.

    Examples:
        >>> a = Run({"q": [ScoredDoc("d1", 9.0), ScoredDoc("d2", 5.0)]})
        >>> b = Run({"q": [ScoredDoc("d2", 0.9)]})
        >>> [(h.doc_id, round(h.score, 5)) for h in fuse_rrf(a, b, k=2)["q"]]
        [('d2', 0.03252), ('d1', 0.01639)]
    """
    check_k(k)
    if rrf_k < 0:
        raise UsageError(f"rrf_k={rrf_k} must be >= 0")
    out = Run(name=name)
    for query_id in list(run_a.results) + [q for q in run_b.results if q not in run_a.results]:
        ranks = [{h.doc_id: r for r, h in enumerate(run.results.get(query_id, []))} for run in (run_a, run_b)]
        docs = list(dict.fromkeys([*ranks[0], *ranks[1]]))
        scores = {d: math.fsum(1.0 / (rrf_k + r[d] + 1) for r in ranks if d in r) for d in docs}
        missing = len(docs)
        docs.sort(key=lambda d: (-scores[d], ranks[0].get(d, missing), ranks[1].get(d, missing)))
        out.results[query_id] = [ScoredDoc(d, scores[d]) for d in docs[:k]]
    return out


class HybridRetriever:
    """Two Retrievers fused linearly (one weight) or by RRF; itself a `Retriever` (``search(queries, k)``).

    Examples:
        >>> from uhdsearch.types import Document
        >>> docs = [Document("d1", "Vitamin D supplements and bone mineral density"),
        ...         Document("d2", "Sequencing the mouse genome"), Document("d3", "Heart failure after cardiac surgery")]
        >>> from uhdsearch.baselines.bm25 import BM25Retriever
        >>> from uhdsearch.baselines.dense import DenseRetriever
        >>> bm25 = BM25Retriever.build(docs, show_progress=False)
        >>> dense = DenseRetriever.build(docs, show_progress=False)
        >>> hybrid = HybridRetriever.tune(bm25, dense, {"q1": "vitamin d and bones"}, {"q1": {"d1": 1}})
        >>> hybrid.search({"q1": "does vitamin d strengthen bones"}, k=2).doc_ids("q1")[0]
        'd1'
    """

    def __init__(
        self, first: Retriever, second: Retriever, weight: float = 0.5, method: Method = "linear",
        depth: int = 100, normalization: Normalization = "min-max", rrf_k: int = 60, name: str = "hybrid",
    ) -> None:
        """
        Args:
            first, second: Any two retrievers with ``search(queries, k) -> Run``.
            weight: The first system's share lambda in [0, 1] (linear only).
            method: ``"linear"`` or ``"rrf"``.
            depth: Each system's list length; at least k is always asked (Luan use 100).
            normalization: See `fuse_linear`.
            rrf_k: See `fuse_rrf`.
            name: Run name.
        """
        if method not in ("linear", "rrf"):
            raise UsageError(f"method={method!r}; choose 'linear' or 'rrf'")
        if not 0.0 <= weight <= 1.0:
            raise UsageError(f"weight={weight} must be between 0 and 1 (the first system's share)")
        check_k(depth, "depth")
        for system in (first, second):
            if not callable(getattr(system, "search", None)):
                raise TypeError(f"a {type(system).__name__} has no search(queries, k) method")
        self.first, self.second = first, second
        self.weight, self.method, self.depth = float(weight), method, int(depth)
        self.normalization, self.rrf_k, self.name = normalization, rrf_k, name

    @classmethod
    def tune(
        cls, first: Retriever, second: Retriever, queries: Mapping[str, str] | Sequence[Query], qrels: Qrels,
        grid: Sequence[float] = DEFAULT_GRID, measure: str = "nDCG@10", **options,
    ) -> HybridRetriever:
        """Pick the weight on a dev split by grid search (each system searched once), return the retriever.

        Ties between weights go to the first in `grid`. The grid's scores are kept in ``dev_scores``.

        Args:
            queries, qrels: The dev split (never the test split).
            grid: Candidate weights.
            measure: ir_measures name to maximize.
            **options: Passed to the constructor (depth, normalization, name).
        """
        if not grid:
            raise UsageError("the weight grid is empty")
        hybrid = cls(first, second, **options)
        queries = as_queries(queries)
        run_a, run_b = (s.search(queries, hybrid.depth) for s in (first, second))
        scores = {w: evaluate(fuse_linear(run_a, run_b, w, hybrid.depth, hybrid.normalization), qrels,
                              [measure])[measure] for w in grid}
        hybrid.weight = float(max(grid, key=lambda w: scores[w]))
        hybrid.dev_scores = scores
        logger.info("%s: weight %.2f (dev %s %.4f; weight 0: %.4f, 1: %.4f)", hybrid.name, hybrid.weight, measure,
                    scores[hybrid.weight], scores.get(0.0, math.nan), scores.get(1.0, math.nan))
        return hybrid

    def search(self, queries: Mapping[str, str] | Sequence[Query], k: int = 1000) -> Run:
        """Search both systems to depth max(depth, k) and fuse; empty queries get empty results.

        Raises:
            ValueError: k <= 0.
        """
        run, live = start_run(queries, k, self.name)
        if not live:
            return run
        depth = max(self.depth, int(k))
        run_a, run_b = (s.search(live, depth) for s in (self.first, self.second))
        if self.method == "rrf":
            fused = fuse_rrf(run_a, run_b, k, self.rrf_k, self.name)
        else:
            fused = fuse_linear(run_a, run_b, self.weight, k, self.normalization, self.name)
        for q in live:
            run.results[q.query_id] = fused.results.get(q.query_id, [])
        return run


def _normalized(hits: list[ScoredDoc], normalization: Normalization) -> list[tuple[str, float]]:
    if normalization == "none" or not hits:
        return [(h.doc_id, float(h.score)) for h in hits]
    values = np.array([h.score for h in hits], dtype=np.float64)
    low, high = values.min(), values.max()
    scaled = (values - low) / (high - low) if high > low else np.ones_like(values)
    return [(h.doc_id, float(s)) for h, s in zip(hits, scaled)]

