"""One experiment registry: systems by name, a shared context, the comparison runner and its report.

    >>> from uhdsearch.experiments import SYSTEMS
    >>> list(SYSTEMS)[:4]
    ['bm25', 'bm25-uni', 'bm25-bi', 'splade-tiny']

Layout: `registry` (name -> System), `context` (SystemContext: shared backbone pass, caches, dev split),
`systems/` (one module per family; each registers its systems), `runner` (`compare`: build the named systems
on a collection and compare them, `uhdsearch compare`'s call), `report` (ComparisonReport, the result JSON).
`run_comparison` is the deprecated name of `compare` (one release).
"""
from __future__ import annotations

from uhdsearch.experiments.registry import BASELINE, SYSTEMS, System, build_system, register, resolve_systems
from uhdsearch.experiments import systems  # noqa: E402,F401  (registers every system)
from uhdsearch.experiments.context import CachedRetriever, SystemContext
from uhdsearch.experiments.report import ComparisonReport
from uhdsearch.experiments.runner import compare, run_comparison  # noqa: F401  (run_comparison: deprecated)

__all__ = ["BASELINE", "SYSTEMS", "CachedRetriever", "ComparisonReport", "System", "SystemContext", "build_system",
           "compare", "register", "resolve_systems"]
