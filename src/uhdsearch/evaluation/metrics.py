"""Retrieval metrics on ir_measures, averaged over every judged query.

ir_measures (through pytrec_eval) averages over the queries that the run and the qrels share, so a
system that returns nothing for a hard query would look better than one that returns something wrong.
Here every judged query (one with at least one relevance > 0) counts, with 0 when the run has no
hits for it; queries the run has but the qrels do not judge are ignored.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import ir_measures

from uhdsearch.errors import UsageError
from uhdsearch.types import Qrels, Run

logger = logging.getLogger(__name__)

DEFAULT_MEASURES = ("nDCG@10", "RR@10", "R@100", "R@1000")


def evaluate(run: Run, qrels: Qrels, measures: Sequence[str] = DEFAULT_MEASURES) -> dict[str, float]:
    """Mean of each measure over the judged queries of `qrels`.

    Args:
        run: The ranked results to score.
        qrels: query_id -> doc_id -> relevance. Queries with no relevance > 0 are not judged.
        measures: ir_measures names, e.g. ``"nDCG@10"``, ``"RR@10"``, ``"R@1000"``, ``"AP"``
            (``"MAP"`` is accepted for AP).

    Returns:
        measure name exactly as given -> mean value over the judged queries.

    Raises:
        ValueError: an unknown measure, no measures, or qrels with no judged query.

    Examples:
        >>> from uhdsearch.types import ScoredDoc
        >>> run = Run({"q1": [ScoredDoc("d1", 2.0), ScoredDoc("d2", 1.0)]})
        >>> evaluate(run, {"q1": {"d2": 1}, "q2": {"d9": 1}}, ["RR@10", "R@100"])
        {'RR@10': 0.25, 'R@100': 0.5}
    """
    values = per_query(run, qrels, measures)
    return {name: math.fsum(by_query.values()) / len(by_query) for name, by_query in values.items()}


def per_query(run: Run, qrels: Qrels, measures: Sequence[str] = DEFAULT_MEASURES) -> dict[str, dict[str, float]]:
    """Value of each measure for each judged query; 0 where the run has no hits for the query.

    Args:
        run: The ranked results to score.
        qrels: query_id -> doc_id -> relevance. Queries with no relevance > 0 are not judged.
        measures: ir_measures names, as in `evaluate`.

    Returns:
        measure name as given -> query_id -> value, with one entry per judged query in qrels order.

    Raises:
        ValueError: an unknown measure, no measures, or qrels with no judged query.
    """
    parsed = _parse_measures(measures)
    judged = [q for q, docs in qrels.items() if any(rel > 0 for rel in docs.values())]
    if not judged:
        raise UsageError(
            f"the qrels have no judged query (none of their {len(qrels)} queries has a relevance > 0); "
            "nothing to evaluate"
        )
    judged_set = set(judged)
    # Scores from rank: ir_measures' providers re-break tied scores each their own way (pytrec_eval by
    # doc_id descending), which would ignore the run's own tie rule.
    run_dict = {
        q: {hit.doc_id: float(len(hits) - rank) for rank, hit in enumerate(hits)}
        for q, hits in run.results.items()
        if q in judged_set and hits
    }
    missing = len(judged) - len(run_dict)
    if missing:
        logger.info("the run has no hits for %d of %d judged queries; they count as 0", missing, len(judged))
    qrels_dict = {q: {d: int(rel) for d, rel in qrels[q].items()} for q in judged}

    found: dict[Any, dict[str, float]] = {m: {} for m in set(parsed.values())}
    if run_dict:
        for metric in ir_measures.iter_calc(list(found), qrels_dict, run_dict):
            if metric.query_id in judged_set:
                found[metric.measure][metric.query_id] = float(metric.value)
    return {
        name: {q: found[measure].get(q, 0.0) for q in judged}
        for name, measure in parsed.items()
    }


def _parse_measures(measures: Sequence[str]) -> dict[str, Any]:
    if isinstance(measures, str):
        measures = [measures]
    if not measures:
        raise UsageError(f"no measures given; pass ir_measures names such as {list(DEFAULT_MEASURES)}")
    parsed = {}
    for name in measures:
        try:
            parsed[name] = ir_measures.parse_measure(name)
        except (NameError, ValueError, TypeError, SyntaxError) as e:
            raise UsageError(
                f"unknown measure {name!r} ({e}); use ir_measures names such as "
                f"{', '.join(DEFAULT_MEASURES)}, AP"
            ) from None
    return parsed
