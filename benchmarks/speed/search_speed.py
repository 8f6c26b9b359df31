"""Search speed: UHD binary and weighted (1 and 2 threads) vs scipy.sparse, Seismic, bm25s and the bandwidth floor.

Synthetic postings at N = 10k, 100k, 1M documents (capped by --max-docs) follow the density of the trained
quickstart model on SciFact (active dims per document, document frequency of every dimension, value
distribution; benchmarks/results/uhd_density_scifact.{json,npz}); the queries are the real SciFact test queries
encoded by that model. bm25s runs on real dictionary text (gcide + WordNet) of the same size.
Set-up once: `bash benchmarks/speed/setup_search_speed.sh`.

    .venv/bin/python -m benchmarks.speed.search_speed --max-docs 100000
    .venv/bin/python -m benchmarks.speed.search_speed --recompute-stats --model out/quickstart/model

Prints a table and writes benchmarks/results/search_speed.json (one row per method, size and thread count).
Generated indexes are cached under --work-dir, keyed by size, seed and the density statistics. Settings (sizes,
methods, threads, Seismic's parameters) come from benchmarks/configs/search_speed.toml (--config).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import time
from pathlib import Path

import numba as nb
import numpy as np
import scipy.sparse as sp

from benchmarks.lib.density import STATS_JSON, STATS_NPZ, compute_stats, load_stats
from benchmarks.lib.peers import bench_bm25s
from benchmarks.lib.seismic_peer import bench_seismic
from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from benchmarks.lib.speed_common import (K, directory_bytes, exact_top, fmt, header, load_oracle, log, recall_vs_exact,
                                         row)
from benchmarks.lib.synthetic import DensityProfile, SyntheticPostings
from benchmarks.lib.timer import time_calls, time_repeats
from uhdsearch.sparse import SparseEncoding

RESULTS_DIR = RESULTS
OUT_JSON = RESULTS_DIR / "search_speed.json"


# --------------------------------------------------------------------------- synthetic indexes + exact oracle
def build_synthetic(profile: DensityProfile, queries: SparseEncoding, n_docs: int, seed: int, work_dir: Path,
                    stats_digest: str, raw_max_bytes: float) -> Path:
    """Generate postings for n_docs documents into a binary and a weighted index (streaming), the raw postings
    when they fit `raw_max_bytes`, and the exact top-k of a query sample (the oracle). Cached by key."""
    from uhdsearch.index.codec import DEFAULT_BITMAP_BIAS
    from uhdsearch.index.writer import IndexWriter

    directory = work_dir / f"n{n_docs}-seed{seed}-{stats_digest}"
    if (directory / "done.json").is_file():
        biases = {json.loads((directory / f"uhd-{v}" / "index_meta.json").read_text()).get("bitmap_bias")
                  for v in ("binary", "weighted")}
        if biases == {DEFAULT_BITMAP_BIAS}:
            return directory
        # an index cached by an older version with another layout would be timed as if it were today's
        log(f"{directory.name}: cached indexes have bitmap_bias {sorted(biases, key=str)}, not "
            f"{DEFAULT_BITMAP_BIAS}: generating again")
        (directory / "done.json").unlink()
    directory.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    synth = SyntheticPostings(profile, n_docs, seed=seed)
    total = synth.n_postings
    keep_raw = total * 8 <= raw_max_bytes
    n_oracle = int(min(queries.n, max(32, 1e9 // (12 * n_docs))))
    q = queries.buckets[0][:n_oracle]
    counts = np.zeros((n_oracle, n_docs), np.int32)
    dots = np.zeros((n_oracle, n_docs), np.float64)
    writers = {v: IndexWriter(directory / f"uhd-{v}", v, dim=synth.dim, n_buckets=1, n_documents=n_docs,
                              overwrite=True) for v in ("binary", "weighted")}
    if keep_raw:
        raw_docs = np.lib.format.open_memmap(directory / "raw_docs.npy", "w+", np.int32, (total,))
        raw_weights = np.lib.format.open_memmap(directory / "raw_weights.npy", "w+", np.float32, (total,))
    offset = 0
    log(f"generating {n_docs:,} documents, {total:,} postings ({total / n_docs:.0f} per document)")
    seconds = {"fit": time.perf_counter() - t0, "draw": 0.0, "write": 0.0, "oracle": 0.0}
    blocks = synth.blocks(max_postings=1 << 25)
    while True:
        t1 = time.perf_counter()
        block = next(blocks, None)
        t2 = time.perf_counter()
        if block is None:
            break
        writers["binary"].add_postings(0, block.first_dim, block.indptr, block.docs)
        writers["weighted"].add_postings(0, block.first_dim, block.indptr, block.docs, block.weights)
        if keep_raw:
            raw_docs[offset:offset + block.docs.shape[0]] = block.docs
            raw_weights[offset:offset + block.docs.shape[0]] = block.weights
        offset += block.docs.shape[0]
        t3 = time.perf_counter()
        _accumulate(block.first_dim, block.indptr, block.docs, block.weights, q.indptr, q.indices, q.data,
                    counts, dots)
        seconds["draw"] += t2 - t1
        seconds["write"] += t3 - t2
        seconds["oracle"] += time.perf_counter() - t3
    t1 = time.perf_counter()
    for w in writers.values():
        w.close()
    seconds["write"] += time.perf_counter() - t1
    indptr = np.zeros(synth.dim + 1, np.int64)
    np.cumsum(synth.document_frequencies(), out=indptr[1:])
    np.save(directory / "raw_indptr.npy", indptr)
    if keep_raw:
        raw_docs.flush()
        raw_weights.flush()
        del raw_docs, raw_weights
    oracle: dict[str, np.ndarray] = {"n_oracle": np.int64(n_oracle)}
    for name, scores in (("binary", counts), ("weighted", dots)):
        tops = []
        for i, scores_row in enumerate(scores):
            top, ties = exact_top(scores_row.astype(np.float64))
            tops.append(top)
            oracle[f"{name}_ties_{i}"] = ties
        oracle[f"{name}_top"] = np.stack(tops)
    np.savez(directory / "oracle.npz", **oracle)
    info = {"n_documents": n_docs, "n_postings": total, "seed": seed, "raw": keep_raw, "n_oracle": n_oracle,
            "seconds": round(time.perf_counter() - t0, 1), "stage_seconds": {k: round(v, 1) for k, v in seconds.items()}}
    (directory / "done.json").write_text(json.dumps(info) + "\n", encoding="utf-8")
    log(f"generated in {info['seconds']} s {info['stage_seconds']} -> {directory}")
    return directory


@nb.njit(parallel=True)  # no on-disk cache: this script runs as __main__ and is imported by tests
def _accumulate(first_dim, indptr, docs, weights, q_indptr, q_dims, q_values, counts, dots):  # pragma: no cover
    n_dims = indptr.shape[0] - 1
    for s in nb.prange(q_indptr.shape[0] - 1):
        for t in range(q_indptr[s], q_indptr[s + 1]):
            d = q_dims[t] - first_dim
            if 0 <= d < n_dims:
                v = np.float64(q_values[t])
                for p in range(indptr[d], indptr[d + 1]):
                    counts[s, docs[p]] += 1
                    dots[s, docs[p]] += v * weights[p]


# --------------------------------------------------------------------------- timing helpers


def copy_bandwidth_gb_s(n_bytes: int = 1 << 29, repeats: int = 5) -> float:
    """Best-of-`repeats` numpy copy of a buffer much larger than the caches; bytes copied per second."""
    a = np.ones(n_bytes // 8)
    b = np.empty_like(a)
    best_s = time_repeats(lambda: np.copyto(b, a), repeats).min() / 1e3
    return n_bytes / best_s / 1e9


def adder_two_thread_speedup(repeats: int = 5) -> float:
    """Speed-up of two threads over one on the binary kernel's bit-sliced adder over cache-resident bitmaps.

    A property of the machine, recorded next to the results: where two vCPUs share one physical core's SIMD
    units (a host's choice, seen to change between boots), no exact kernel can scale single queries there.
    """
    from concurrent.futures import ThreadPoolExecutor

    from uhdsearch.index.kernels.bitmaps import MAX_PLANES
    from uhdsearch.index.kernels.levels import SCRATCH_PLANES, accumulate_levels
    from uhdsearch.index.kernels.ranges import CHUNK

    words, n_rows, passes = 313, 583, 400  # 20k documents x a real query's bitmap dims: ~1.5 MB, in L2/L3

    @nb.njit(nogil=True)
    def scan(bitmaps, bases, planes, carry):  # pragma: no cover - compiled
        one_level = np.array([0, bases.shape[0]], np.int64)  # a binary query: every row has weight 1
        scratch = np.zeros(SCRATCH_PLANES * (CHUNK // 64), np.uint64)
        for _ in range(passes):
            accumulate_levels(bitmaps, bases, one_level, words, 0, 10, planes, CHUNK // 64, carry, scratch)

    rng = np.random.default_rng(0)
    jobs = [(rng.integers(0, 2**63, n_rows * words, dtype=np.uint64), np.arange(n_rows, dtype=np.int64) * words,
             np.zeros(CHUNK // 64 * MAX_PLANES, np.uint64), np.zeros(CHUNK // 64, np.uint64)) for _ in range(2)]
    scan(*jobs[0])
    ratios = []
    with ThreadPoolExecutor(2) as pool:
        for _ in range(repeats):
            t0 = time.perf_counter()
            for job in jobs:
                scan(*job)
            t1 = time.perf_counter()
            list(pool.map(lambda job: scan(*job), jobs))
            ratios.append((t1 - t0) / (time.perf_counter() - t1))
    return float(np.median(ratios))


# --------------------------------------------------------------------------- methods
def bench_uhd(directory: Path, queries: SparseEncoding, n_docs: int, threads: list[int], floor: float,
              warm_up: bool = True) -> list[dict]:
    """Opened memory-mapped, then (unless warm_up is False) its pages faulted in before timing, as a server
    would do once; cold, the first queries of a 1M index spend ~10x the p50 mapping pages."""
    from uhdsearch.index.inverted import InvertedIndex

    rows = []
    singles = [queries[i:i + 1] for i in range(queries.n)]
    for scoring in ("binary", "weighted"):
        path = directory / f"uhd-{scoring}"
        t0 = time.perf_counter()
        index = InvertedIndex.load(path, mmap=True, verify=False)
        open_ms = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        if warm_up:
            index.warm_up()
        warm_up_ms = (time.perf_counter() - t0) * 1e3 if warm_up else None
        n_postings = int(np.load(directory / "raw_indptr.npy")[-1])
        disk = directory_bytes(path)
        if hasattr(index, "bytes_per_document"):  # posting arrays only, as stored
            per_doc, per_posting = index.bytes_per_document(), index.bytes_per_posting(include_weights=False)
        else:
            per_doc, per_posting = disk / n_docs, disk / n_postings
        top, ties = load_oracle(directory, scoring, queries.n)
        for t in threads:
            def search(q, t=t):
                return index.search_encoded(q, K, [1.0], scoring, n_threads=t)
            # how far the machine itself lets two threads scale, just before they are timed (it varied 1.0-1.8x
            # within minutes when the host was busy)
            probe = {"adder_two_thread_speedup": round(adder_two_thread_speedup(), 2)} if t >= 2 else {}
            times = time_calls(search, singles, n_warmup=10 if n_docs <= 100_000 else 3)
            t0 = time.perf_counter()
            numbers, _ = search(queries)
            qps = queries.n / (time.perf_counter() - t0)
            numbers = numbers[: top.shape[0], :K]  # the batch answers are checked against the oracle
            identical = bool(np.array_equal(numbers, top))
            rows.append(row(f"uhd-{scoring}", n_docs, t, times, qps, per_doc, recall_vs_exact(numbers, ties),
                            floor, bytes_per_posting=round(per_posting, 3), disk_bytes_per_doc=round(disk / n_docs, 1),
                            open_ms=round(open_ms, 1), warm_up_ms=None if warm_up_ms is None else round(warm_up_ms, 1),
                            identical_to_oracle=identical, n_oracle_queries=int(top.shape[0]), **probe))
            log(fmt(rows[-1]))
        del index
        gc.collect()
    return rows


def bench_scipy(directory: Path, queries: SparseEncoding, n_docs: int, floor: float, max_bytes: float) -> list[dict]:
    """Postings as a (dim x n_docs) CSR matrix (the document matrix transposed), scored as Q @ P: scipy
    touches only the query dims' rows, as an inverted index does. One thread (scipy's sparse products)."""
    indptr = np.load(directory / "raw_indptr.npy")
    nnz = int(indptr[-1])
    need = nnz * 8 + indptr.shape[0] * 8
    if not (directory / "raw_docs.npy").is_file() or need > max_bytes:
        return [row("scipy", n_docs, 1, None, None, need / n_docs, None, floor,
                    note=f"skipped: the matrix needs {need / 1e9:.1f} GB (limit {max_bytes / 1e9:.0f} GB, "
                         "--raw-max-gb)")]
    idx_dtype = np.int32 if nnz < 2**31 else np.int64
    matrix = sp.csr_matrix((np.load(directory / "raw_weights.npy"), np.load(directory / "raw_docs.npy"),
                            indptr.astype(idx_dtype)), shape=(indptr.shape[0] - 1, n_docs), copy=False)
    rows = []
    for scoring in ("binary", "weighted"):
        m = matrix
        if scoring == "binary":
            m = sp.csr_matrix((np.ones(nnz, np.float32), matrix.indices, matrix.indptr), shape=matrix.shape, copy=False)
        q = queries.buckets[0] if scoring == "weighted" else queries.binarize().buckets[0]

        def top_of(qm):
            scores = (qm @ m).toarray()
            return np.stack([exact_top(s.astype(np.float64))[0] for s in scores])
        singles = [q[i:i + 1] for i in range(q.shape[0])]
        top, ties = load_oracle(directory, scoring, queries.n)
        numbers = top_of(q[: top.shape[0]])
        times = time_calls(top_of, singles, n_warmup=10)
        t0 = time.perf_counter()
        for start in range(0, q.shape[0], 32):
            top_of(q[start:start + 32])
        qps = q.shape[0] / (time.perf_counter() - t0)
        rows.append(row("scipy", n_docs, 1, times, qps, (need - (nnz * 4 if scoring == "binary" else 0)) / n_docs,
                        recall_vs_exact(numbers, ties), floor, scoring=scoring,
                        identical_to_oracle=bool(np.array_equal(numbers, top))))
        log(fmt(rows[-1]))
    del matrix
    gc.collect()
    return rows


# --------------------------------------------------------------------------- bm25s on real text


# --------------------------------------------------------------------------- driver


def ratios(rows: list[dict]) -> list[str]:
    lines = []
    for n in sorted({r["n_docs"] for r in rows}):
        by = {(r["method"], r["threads"]): r for r in rows if r["n_docs"] == n and r.get("p50_ms") is not None
              and r.get("scoring", r["method"].removeprefix("uhd-")) in ("binary", "weighted", "bm25s", "seismic")}
        b1, b2, bm = by.get(("uhd-binary", 1)), by.get(("uhd-binary", 2)), by.get(("bm25s", 1))
        if b1 is None:
            continue
        parts = [f"N={n:,}: uhd-binary p50 / floor = {b1['p50_ms'] / b1['floor_ms']:.2f} (goal <= 3)"]
        if bm:
            parts.append(f"/ bm25s p50 = {b1['p50_ms'] / bm['p50_ms']:.3f} (goal <= 0.2)")
        if b2:
            parts.append(f"2-thread speed-up = {b1['p50_ms'] / b2['p50_ms']:.2f}x (goal >= 1.6"
                         + (f"; the machine's adder alone: {b2['adder_two_thread_speedup']:.2f}x)"
                            if "adder_two_thread_speedup" in b2 else ")"))
        if "bytes_per_posting" in b1:
            parts.append(f"bytes/posting = {b1['bytes_per_posting']:.2f} (goal <= 1.2)")
        lines.append("; ".join(parts))
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-docs", type=int, help="caps --sizes")
    parser.add_argument("--sizes", type=comma_list(int), help="comma-separated N (capped by --max-docs)")
    parser.add_argument("--methods", type=comma_list(), help="comma-separated")
    parser.add_argument("--threads", type=comma_list(int), help="comma-separated; uhd's search threads")
    parser.add_argument("--warm-up", action=argparse.BooleanOptionalAction,
                        help="--no-warm-up: time uhd on a cold memory-mapped index (no InvertedIndex.warm_up)")
    parser.add_argument("--n-queries", type=int,
                        help="real queries timed per size; 0: all 300 up to 100k documents, 100 beyond")
    parser.add_argument("--work-dir", type=Path, default=ROOT / "out" / "search_speed",
                        help="(default: out/search_speed)")
    parser.add_argument("--seed", type=int, help="of the synthetic postings and the bm25s texts")
    parser.add_argument("--raw-max-gb", type=float, help="keep raw vectors (scipy, Seismic) up to this")
    parser.add_argument("--seismic-timeout", type=float, help="seconds per Seismic build+search")
    parser.add_argument("--seismic-n-postings", type=comma_list(int),
                        help="comma-separated Seismic builds: postings kept per dimension (its default is 3500)")
    parser.add_argument("--seismic-mem-gb", type=float, help="address-space cap of the Seismic process")
    parser.add_argument("--recompute-stats", action="store_true", help="encode SciFact with --model again")
    parser.add_argument("--model", type=Path, default=ROOT / "out" / "quickstart" / "model",
                        help="(default: out/quickstart/model)")
    parser.add_argument("--stats-index", type=Path, default=None,
                        help="with --recompute-stats: read document vectors from this weighted index of the same model")
    parser.add_argument("--out", type=Path, default=OUT_JSON, help="(default: results/search_speed.json)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args, config, settings = parse_args(parser, "search_speed", argv)
    if args.recompute_stats or not STATS_NPZ.is_file():
        compute_stats(args.model, args.stats_index, batch_size=32)
    profile, queries, stats_digest = load_stats()
    sizes = [n for n in args.sizes if n <= args.max_docs]
    if any(n < 100 for n in sizes):
        parser.error(f"sizes {args.sizes}: every size must be at least 100 documents")
    methods = set(args.methods)
    threads = args.threads
    bandwidth = copy_bandwidth_gb_s()
    log(f"copy bandwidth {bandwidth:.1f} GB/s; {queries.n} real queries, mean {queries.active_per_row().mean():.0f} "
        f"active dims; sizes {sizes}")
    log(header())
    rows = []
    for n in sizes:
        directory = build_synthetic(profile, queries, n, args.seed, args.work_dir, stats_digest, args.raw_max_gb * 1e9)
        df = np.diff(np.load(directory / "raw_indptr.npy"))
        touched = np.array([df[queries.buckets[0].indices[a:b]].sum()
                            for a, b in zip(queries.buckets[0].indptr[:-1], queries.buckets[0].indptr[1:])])
        n_q = args.n_queries or (queries.n if n <= 100_000 else 100)
        touched = touched[:n_q]
        floor = float(np.median(touched * 4 / (bandwidth * 1e9) * 1e3))
        timed = queries[:n_q]
        if "uhd" in methods:
            rows += bench_uhd(directory, timed, n, threads, floor, warm_up=args.warm_up)
        if "scipy" in methods:
            rows += bench_scipy(directory, timed, n, floor, args.raw_max_gb * 1e9)
        failed = [r for r in rows if r["method"] == "seismic" and r["p50_ms"] is None]
        if "seismic" in methods and failed and len(failed) == sum(r["method"] == "seismic" for r in rows):
            rows.append(row("seismic", n, 1, None, None, None, None, floor,
                            note=f"skipped: every build failed at N={failed[-1]['n_docs']:,}"))
        elif "seismic" in methods:
            rows += bench_seismic(directory, timed, n, floor, args.seismic_timeout, args.seismic_mem_gb,
                                  args.seismic_n_postings, args.seismic_build, args.seismic_search)
        if "bm25s" in methods:
            rows += bench_bm25s(n, n_q, args.seed)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB; grows across sizes
        for r in rows:
            if r["n_docs"] == n:
                r.setdefault("median_touched_postings", int(np.median(touched)))
                r.setdefault("process_max_rss_gb", round(peak, 2))
    print(header())
    for r in rows:
        print(fmt(r))
    print(f"copy bandwidth: {bandwidth:.1f} GB/s; floor = touched postings x 4 B / bandwidth (median over queries)")
    for line in ratios(rows):
        print(line)
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "copy_bandwidth_gb_s": round(bandwidth, 2),
               "stats": STATS_JSON.name, **record(config, settings)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([dict(r, machine=machine) for r in rows], indent=1) + "\n", encoding="utf-8")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
