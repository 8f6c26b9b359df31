"""Compare retrieval systems on one query set: mean scores and paired t-tests against a baseline. No plotting."""
from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from uhdsearch.errors import UsageError
from uhdsearch.evaluation.metrics import DEFAULT_MEASURES, per_query
from uhdsearch.types import Qrels, Query, Retriever, Run, as_queries

logger = logging.getLogger(__name__)

SIGNIFICANCE_LEVEL = 0.05


@dataclass
class Comparison:
    """Results of `compare`.

    Attributes:
        measures: The measure names, as given.
        baseline: The system the others are tested against.
        scores: system -> measure -> mean over judged queries.
        p_values: system -> measure -> two-sided paired t-test p-value against the baseline
            (the baseline itself has no entry; NaN where fewer than two judged queries).
        per_query: system -> measure -> query_id -> value, the data the tests ran on.
        runs: system -> Run.
    """

    measures: list[str]
    baseline: str
    scores: dict[str, dict[str, float]]
    p_values: dict[str, dict[str, float]]
    per_query: dict[str, dict[str, dict[str, float]]] = field(repr=False)
    runs: dict[str, Run] = field(repr=False)

    @property
    def n_queries(self) -> int:
        """Number of judged queries every mean and test is over."""
        for by_measure in self.per_query.values():
            for by_query in by_measure.values():
                return len(by_query)
        return 0

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready summary (no runs, no per-query values; NaN p-values become None).

        Returns:
            ``{"measures", "baseline", "n_queries", "scores", "p_values"}``.
        """
        return {
            "measures": list(self.measures),
            "baseline": self.baseline,
            "n_queries": self.n_queries,
            "scores": {s: dict(by_measure) for s, by_measure in self.scores.items()},
            "p_values": {
                s: {m: (None if math.isnan(p) else p) for m, p in by_measure.items()}
                for s, by_measure in self.p_values.items()
            },
        }

    def format_table(self) -> str:
        """Render the scores as a plain-text table, one row per system, with significance marks.

        ``*`` marks a score significantly above the baseline's, ``†`` one significantly below
        (two-sided paired t-test, p < 0.05). A footnote line says so.

        Returns:
            The table, lines joined by newlines, no trailing newline.
        """
        header = ["system", *self.measures]
        rows = []
        for system, by_measure in self.scores.items():
            cells = [system]
            for measure in self.measures:
                value = by_measure[measure]
                mark = ""
                p = self.p_values.get(system, {}).get(measure, math.nan)
                if p < SIGNIFICANCE_LEVEL:
                    mark = "*" if value > self.scores[self.baseline][measure] else "†"
                cells.append(f"{value:.4f}{mark}")
            rows.append(cells)
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

        def line(cells: list[str]) -> str:
            first = cells[0].ljust(widths[0])
            rest = [c.ljust(w) for c, w in zip(cells[1:], widths[1:])]
            return "  ".join([first, *rest]).rstrip()

        footnote = (
            f"* / †: significantly better / worse than baseline {self.baseline!r} "
            f"(paired two-sided t-test, p < {SIGNIFICANCE_LEVEL}, {self.n_queries} judged queries)"
        )
        rule = "-" * len(line(header))
        return "\n".join([line(header), rule, *(line(r) for r in rows), footnote])


def compare(
    systems: Mapping[str, Run | Retriever],
    queries: Mapping[str, str] | Sequence[Query],
    qrels: Qrels,
    measures: Sequence[str] = DEFAULT_MEASURES,
    baseline: str | None = None,
    k: int = 1000,
) -> Comparison:
    """Score several systems on the same queries and test each against a baseline.

    Args:
        systems: name -> a Run, or a `Retriever` (anything with ``search(queries, k) -> Run``: a Searcher,
            BM25Retriever, ...) that is called here. To build registered systems by name on a collection
            instead, see `uhdsearch.experiments.compare`.
        queries: The queries to send to retrievers ({query_id: text} or Query records).
        qrels: query_id -> doc_id -> relevance; the judged queries are those with a relevance > 0.
        measures: ir_measures names, e.g. ``("nDCG@10", "R@100")``.
        baseline: Name of the system the others are tested against; None means the first system.
        k: Result depth asked of each retriever.

    Returns:
        A Comparison with mean scores, p-values, per-query values and the runs.

    Raises:
        ValueError: no systems, `baseline` not among them, or an unknown measure.
        TypeError: a system is neither a Run nor has a ``search`` method.

    Examples:
        >>> from uhdsearch.types import ScoredDoc
        >>> good = Run({"q1": [ScoredDoc("d1", 1.0)], "q2": [ScoredDoc("d2", 1.0)]})
        >>> bad = Run({"q1": [ScoredDoc("d9", 1.0)]})
        >>> c = compare({"good": good, "bad": bad}, {}, {"q1": {"d1": 1}, "q2": {"d2": 1}}, ["RR@10"])
        >>> c.scores
        {'good': {'RR@10': 1.0}, 'bad': {'RR@10': 0.0}}
    """
    if not systems:
        raise UsageError("no systems to compare; pass {name: Run or retriever}")
    names = list(systems)
    baseline = names[0] if baseline is None else baseline
    if baseline not in systems:
        raise UsageError(f"baseline {baseline!r} is not one of the systems: {', '.join(names)}")
    measures = [measures] if isinstance(measures, str) else list(measures)

    runs: dict[str, Run] = {}
    query_list: list[Query] | None = None
    for name, system in systems.items():
        if isinstance(system, Run):
            runs[name] = system
        elif callable(getattr(system, "search", None)):
            if query_list is None:
                query_list = as_queries(queries)
            logger.info("searching %d queries with %s (k=%d)", len(query_list), name, k)
            runs[name] = system.search(query_list, k)
        else:
            raise TypeError(
                f"system {name!r} is a {type(system).__name__}; expected a Run or an object with search(queries, k)"
            )

    values = {name: per_query(run, qrels, measures) for name, run in runs.items()}
    scores = {
        name: {m: math.fsum(v[m].values()) / len(v[m]) for m in measures} for name, v in values.items()
    }
    p_values = {
        name: {m: paired_ttest(values[name][m], values[baseline][m]) for m in measures}
        for name in names
        if name != baseline
    }
    return Comparison(
        measures=measures, baseline=baseline, scores=scores, p_values=p_values, per_query=values, runs=runs
    )


def paired_ttest(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Two-sided paired t-test p-value between two systems' per-query values.

    Args:
        a: query_id -> value for one system.
        b: query_id -> value for the other, over the same queries.

    Returns:
        The p-value of ``scipy.stats.ttest_rel``; 1.0 when every pair is equal (scipy gives NaN there),
        NaN with fewer than two queries.

    Raises:
        ValueError: `a` and `b` cover different queries.

    Examples:
        >>> paired_ttest({"q1": 0.5, "q2": 1.0}, {"q1": 0.5, "q2": 1.0})
        1.0
    """
    if a.keys() != b.keys():
        only_a, only_b = len(a.keys() - b.keys()), len(b.keys() - a.keys())
        raise UsageError(
            f"paired test needs the same queries on both sides; {only_a} only in the first, {only_b} only in the second"
        )
    keys = list(a)
    x = np.array([a[q] for q in keys], dtype=np.float64)
    y = np.array([b[q] for q in keys], dtype=np.float64)
    if len(keys) < 2:
        return math.nan
    if np.array_equal(x, y):
        return 1.0
    with warnings.catch_warnings():
        # A constant non-zero difference divides by a zero variance; scipy's answer (p=0) is right.
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_rel(x, y).pvalue)
