"""Micro-benchmark of the search kernels on synthetic postings shaped like real UHD encodings.

Dimension frequencies and queries come from the quickstart model on SciFact
(benchmarks/results/uhd_density_scifact.npz: df of all 32,768 dims over 5,183 documents, 300 real queries with
~640 active dims each). Each dim d is active in a document with probability df_d / 5,183, independently.
Prints ms/query (p50 over queries of each query's fastest of --repeat runs, one query at a time) for several
bitmap/packed-list splits, on 1 and 2 threads, batch throughput, index bytes per posting, and the floor = touched
postings x 4 bytes / copy bandwidth. Settings come from benchmarks/configs/kernels.toml (--config).

    .venv/bin/python -m benchmarks.speed.kernels --n-docs 100000
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp

from benchmarks.lib.settings import RESULTS, comma_list, parse_args, relative
from benchmarks.lib.timer import time_repeats
from uhdsearch.index.codec import compress
from uhdsearch.index.inverted import BinaryIndex, Postings, WeightedIndex, read_only
from uhdsearch.search.oracle import score_bucket
from uhdsearch.sparse import SparseEncoding

DENSITY = RESULTS / "uhd_density_scifact.npz"


@numba.njit(cache=True)
def _sample(p, n, seed, count_only, indptr, docs):
    """Bernoulli(p_d) activity per (doc, dim), drawn as geometric gaps: O(postings), sorted by construction."""
    np.random.seed(seed)
    out = 0
    for d in range(p.shape[0]):
        if not count_only:
            out = indptr[d]
        if p[d] <= 0.0:
            continue
        log_q = np.log1p(-p[d]) if p[d] < 1.0 else -np.inf
        doc = -1
        while True:
            gap = 0 if p[d] >= 1.0 else int(np.floor(np.log(1.0 - np.random.random()) / log_q))
            doc += 1 + gap
            if doc >= n:
                break
            if count_only:
                indptr[d + 1] += 1
            else:
                docs[out] = doc
                out += 1


def synthetic_postings(df: np.ndarray, n_ref: int, n_docs: int, seed: int = 0):
    p = np.minimum(df / n_ref, 1.0)
    counts = np.zeros(p.shape[0] + 1, np.int64)
    _sample(p, n_docs, seed, True, counts, np.zeros(0, np.int32))
    indptr = np.cumsum(counts).astype(np.int64)
    docs = np.empty(int(indptr[-1]), np.int32)
    _sample(p, n_docs, seed, False, indptr, docs)  # same seed: the same draws again
    return indptr, docs


def copy_bandwidth() -> float:
    a = np.ones(64 * 1024 * 1024 // 8, np.float64)
    b = np.empty_like(a)
    best = time_repeats(lambda: np.copyto(b, a), 5).min() / 1e3
    return a.nbytes / best  # bytes read per second


def timed(fn, repeat) -> np.ndarray:
    """Seconds of each of `repeat` calls."""
    return time_repeats(fn, repeat) / 1e3


def time_open(indptr, docs, n_docs, dim, queries, step=2048) -> None:
    """Write through IndexWriter range by range, then time load (memory-mapped, with and without checksums)."""
    from uhdsearch.index.inverted import InvertedIndex
    from uhdsearch.index.writer import IndexWriter

    with tempfile.TemporaryDirectory(dir=".") as tmp:
        path = Path(tmp) / "idx"
        t = time.perf_counter()
        with IndexWriter(path, "binary", dim, 1, n_docs) as writer:
            for first in range(0, dim, step):
                last = min(first + step, dim)
                lo, hi = indptr[first], indptr[last]
                writer.add_postings(0, first, indptr[first:last + 1] - lo, docs[lo:hi])
        write_s = time.perf_counter() - t
        disk = sum(f.stat().st_size for f in path.iterdir())
        for verify in (False, None, True):
            t = time.perf_counter()
            index = InvertedIndex.load(path, mmap=True, verify=verify)
            open_s = time.perf_counter() - t
            t = time.perf_counter()
            index.search_encoded(queries[:1], 10, [1.0], "binary", n_threads=1)
            first_ms = 1000 * (time.perf_counter() - t)
            print(f"open (verify={verify}): {open_s * 1000:.0f} ms, then first query {first_ms:.1f} ms"
                  f" [{disk / 1e6:.0f} MB on disk, written in {write_s:.1f} s]")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-docs", type=int)
    parser.add_argument("--n-queries", type=int)
    parser.add_argument("--biases", type=comma_list(), help="bitmap_bias values to compare")
    parser.add_argument("--repeat", type=int, help="runs per query; its fastest counts (shared machines)")
    parser.add_argument("--threads", type=comma_list(int), help="search threads timed")
    parser.add_argument("--weighted", action=argparse.BooleanOptionalAction,
                        help="also time weighted scoring (more memory)")
    parser.add_argument("--reference", action=argparse.BooleanOptionalAction,
                        help="also time the numpy bincount kernel")
    parser.add_argument("--open", action=argparse.BooleanOptionalAction,
                        help="also write the index with IndexWriter and time opening it")
    return parser


def main() -> None:
    args, config, settings = parse_args(build_parser(), "kernels")
    print(f"settings from {relative(config)}: {settings}")

    z = np.load(DENSITY, allow_pickle=False)
    df, n_ref = z["doc_frequency"].astype(np.float64), int(z["n_documents"])
    dim = df.shape[0]
    qptr, qdims, qvals = z["query_indptr"], z["query_dims"], z["query_values"]
    n_q = min(args.n_queries, qptr.shape[0] - 1)
    queries = SparseEncoding([sp.csr_matrix((qvals[:qptr[n_q]], qdims[:qptr[n_q]], qptr[:n_q + 1]),
                                            shape=(n_q, dim))])
    t = time.perf_counter()
    indptr, docs = synthetic_postings(df, n_ref, args.n_docs)
    n_postings = docs.shape[0]
    print(f"{args.n_docs:,} docs, {n_postings / args.n_docs:.0f} postings/doc, generated in "
          f"{time.perf_counter() - t:.1f}s; {n_q} queries, {np.diff(qptr[:n_q + 1]).mean():.0f} dims each")
    p = np.diff(indptr)
    touched = np.array([p[qdims[qptr[i]:qptr[i + 1]]].sum() for i in range(n_q)])
    bandwidth = copy_bandwidth()
    floor_ms = np.median(touched) * 4 / bandwidth * 1000
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s; touched postings/query {np.median(touched):,.0f}; "
          f"floor {floor_ms:.2f} ms")
    weights = np.random.default_rng(0).uniform(0.01, 1, n_postings).astype(np.float32) if args.weighted else None

    rows = []
    for bias_text in args.biases:
        bias = float(bias_text)
        t = time.perf_counter()
        bucket = compress(indptr, docs, weights, args.n_docs, bias if np.isfinite(bias) else 1e30)
        build_s = time.perf_counter() - t
        klass = WeightedIndex if args.weighted else BinaryIndex
        index = klass([read_only(bucket)], [str(i) for i in range(args.n_docs)], dim, {"encoder_digest": None}, None)
        bpp = index.bytes_per_posting()
        share = np.diff(bucket.indptr)[bucket.bitmap_rows >= 0].sum() / n_postings
        index.search_encoded(queries[:2], 10, [1.0], "binary", n_threads=2)  # compile / warm
        scorings = ["binary"] + (["weighted"] if args.weighted else [])
        for scoring in scorings:
            for threads in args.threads:
                times = [min(timed(lambda i=i: index.search_encoded(queries[i:i + 1], 10, [1.0], scoring,
                                                                      n_threads=threads), args.repeat))
                         for i in range(n_q)]
                batch = timed(lambda: index.search_encoded(queries, 10, [1.0], scoring, n_threads=threads), 1)[0]
                rows.append((f"bias {bias_text}", scoring, threads, np.median(times) * 1000,
                             np.percentile(times, 95) * 1000, n_q / batch, bpp, share, build_s))
    if args.reference:
        postings = Postings(indptr, docs, weights)
        times = timed(lambda: [score_bucket(postings, qdims[qptr[i]:qptr[i + 1]].astype(np.int64),
                                            qvals[qptr[i]:qptr[i + 1]], args.n_docs, "binary")
                               for i in range(min(n_q, 10))], 1)
        rows.append(("numpy bincount", "binary", 1, times[0] / min(n_q, 10) * 1000, float("nan"), float("nan"),
                     4.0, 0.0, 0.0))
    if args.open:
        time_open(indptr, docs, args.n_docs, dim, queries)
    print(f"{'layout':<16}{'scoring':<10}{'threads':>8}{'p50 ms':>9}{'p95 ms':>9}{'batch q/s':>11}"
          f"{'B/posting':>11}{'bitmap share':>14}{'x floor':>9}{'build s':>9}")
    for name, scoring, threads, p50, p95, qps, bpp, share, build_s in rows:
        print(f"{name:<16}{scoring:<10}{threads:>8}{p50:>9.2f}{p95:>9.2f}{qps:>11.1f}{bpp:>11.3f}{share:>14.1%}"
              f"{p50 / floor_ms:>9.2f}{build_s:>9.1f}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
