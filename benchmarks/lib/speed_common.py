"""Shared pieces of the search-speed benchmarks: result rows, the exact top-k oracle and its recall (timing:
benchmarks.lib.timer)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

K = 10


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def exact_top(scores: np.ndarray, k: int = K, tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Top-k doc numbers under the tie rule (score desc, doc asc), and every doc scoring >= the k-th score."""
    positive = np.flatnonzero(scores > 0)
    values = scores[positive]
    if positive.shape[0] > k:
        kth = np.partition(values, values.shape[0] - k)[values.shape[0] - k]
        keep = values >= kth - tol * max(1.0, abs(kth))
        positive, values = positive[keep], values[keep]
    order = np.lexsort((positive, -values))
    top = np.full(k, -1, np.int64)
    top[: min(k, order.shape[0])] = positive[order[:k]]
    return top, positive.astype(np.int64)


def load_oracle(directory: Path, scoring: str, n_queries: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Exact top-K (tie rule) and tie sets of the first min(n_queries, stored) queries."""
    with np.load(directory / "oracle.npz", allow_pickle=False) as z:
        n = min(int(z["n_oracle"]), n_queries)
        return z[f"{scoring}_top"][:n], [z[f"{scoring}_ties_{i}"] for i in range(n)]


def recall_vs_exact(numbers: np.ndarray, ties: list[np.ndarray]) -> float:
    """Tie-aware recall@K: a returned document counts when its exact score is at least the exact K-th score."""
    hits = [min(K, np.isin(row[row >= 0], tie).sum()) / min(K, max(1, tie.shape[0]))
            for row, tie in zip(numbers, ties)]
    return float(np.mean(hits))


def row(method, n_docs, threads, times, qps, bytes_per_doc, recall, floor, **extra) -> dict:
    out = {"method": method, "n_docs": n_docs, "threads": threads,
           "p50_ms": None if times is None else round(float(np.percentile(times, 50)), 3),
           "p95_ms": None if times is None else round(float(np.percentile(times, 95)), 3),
           "qps_batch": None if qps is None else round(qps, 1),
           "index_bytes_per_doc": None if bytes_per_doc is None else round(bytes_per_doc, 1),
           "recall@10_vs_exact": None if recall is None else round(recall, 4),
           "floor_ms": None if floor is None else round(floor, 3)}
    out.update(extra)
    return out


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def fmt(r: dict) -> str:
    cells = [f"{r['method']:<12}", f"{r['n_docs']:>9,}", f"{r['threads']:>2}"]
    for key, width in (("p50_ms", 9), ("p95_ms", 9), ("qps_batch", 9), ("index_bytes_per_doc", 10),
                       ("recall@10_vs_exact", 7), ("floor_ms", 8)):
        v = r.get(key)
        cells.append(f"{'-' if v is None else (f'{v:.3g}' if isinstance(v, float) else v):>{width}}")
    extra = r.get("scoring") or r.get("seismic_search") or ""
    note = r.get("note", "")
    return " ".join(cells) + (f"  {extra}" if extra else "") + (f"  [{note[:90]}]" if note else "")


def header() -> str:
    return (f"{'method':<12} {'n_docs':>9} {'th':>2} {'p50_ms':>9} {'p95_ms':>9} {'qps':>9} {'B/doc':>10} "
            f"{'R@10':>7} {'floor':>8}")

