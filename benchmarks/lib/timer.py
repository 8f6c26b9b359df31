"""The one timer of the benchmarks: milliseconds per call, their median and 95th percentile, and the CPU they ran on.

Every timing loop of benchmarks/ goes through `time_calls` (one call per item, e.g. one search per query),
`time_repeats` (the same call again and again) or `time_interleaved` (systems taking turns, query by query), which
return the milliseconds of each timed call in call order, (n_calls,) float64; `percentiles` gives the figures the
result JSONs report. A timing means little without the CPU: `cpu_record` is uhdsearch's record of it, and
`benchmarks.lib.settings.record` puts it in every result JSON.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from uhdsearch.encoder.machine import cpu_record

__all__ = ["cpu_record", "median_ms", "median_seconds", "p95_ms", "percentiles", "time_calls", "time_interleaved", "time_repeats"]

T = TypeVar("T")


def time_calls(call: Callable[[T], Any], items: Sequence[T], n_warmup: int = 0) -> np.ndarray:
    """Milliseconds of `call(item)` for each item in order, after untimed calls on the first `n_warmup` items.

    Returns (len(items),) float64.
    """
    for item in items[:n_warmup]:
        call(item)
    ms = np.empty(len(items), np.float64)
    for i, item in enumerate(items):
        start = time.perf_counter()
        call(item)
        ms[i] = (time.perf_counter() - start) * 1e3
    return ms


def time_repeats(call: Callable[[], Any], repeats: int, n_warmup: int = 0) -> np.ndarray:
    """Milliseconds of each of `repeats` calls of `call()`, after `n_warmup` untimed ones. Returns (repeats,) float64."""
    for _ in range(n_warmup):
        call()
    ms = np.empty(repeats, np.float64)
    for i in range(repeats):
        start = time.perf_counter()
        call()
        ms[i] = (time.perf_counter() - start) * 1e3
    return ms


def median_seconds(call: Callable[[], Any], repeats: int, n_warmup: int = 1) -> float:
    """The median seconds of `repeats` calls of `call()` after `n_warmup` untimed ones (one by default)."""
    return median_ms(time_repeats(call, repeats, n_warmup)) / 1e3


def time_interleaved(systems: Mapping[str, tuple[Callable[[Any], Any], Sequence[Any]]],
                     n_rows: int) -> dict[str, np.ndarray]:
    """{name: (search, rows)} -> {name: (n_rows,) ms}: the systems take turns, one search each, so that the load of
    other jobs falls alike on all; after one untimed pass over all rows (five warm-up queries left the first
    system's pages cold: 0.45 against 0.09 ms).

    Turn i gives system s query (i + s n / n_systems) mod n: consecutive searches never share a query. Timing the
    systems on the same query back to back let the second find that query's rows in the 32 MB L3 cache (1M
    documents, max_df 0.1: 19 MB of rows; both systems looked 3-5x faster than at max_df 0.2).
    """
    for search, rows in systems.values():
        for r in rows:
            search(r)
    times = {name: np.empty(n_rows, np.float64) for name in systems}
    names = list(systems)
    for i in range(n_rows):
        for s, name in enumerate(names):
            search, rows = systems[name]
            start = time.perf_counter()
            search(rows[(i + s * n_rows // len(names)) % n_rows])
            times[name][i] = (time.perf_counter() - start) * 1e3
    return times


def median_ms(ms: Sequence[float] | np.ndarray) -> float:
    """The median of timings (the middle value, or the mean of the two middle ones)."""
    return float(np.median(ms))


def p95_ms(ms: Sequence[float] | np.ndarray) -> float:
    """The 95th percentile of timings (numpy's linear interpolation between the closest ranks)."""
    return float(np.percentile(ms, 95))


def percentiles(ms: Sequence[float] | np.ndarray, digits: int = 3) -> dict[str, float]:
    """{"p50_ms", "p95_ms"} of timings, rounded to `digits` decimals: the figures a result JSON reports."""
    return {"p50_ms": round(median_ms(ms), digits), "p95_ms": round(p95_ms(ms), digits)}
