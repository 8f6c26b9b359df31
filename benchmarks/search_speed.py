"""Search speed: UHD binary and weighted (1 and 2 threads) vs scipy.sparse, Seismic, bm25s and the bandwidth floor.

Synthetic postings at N = 10k, 100k, 1M documents (capped by --max-docs) follow the density of the trained
quickstart model on SciFact (active dims per document, document frequency of every dimension, value
distribution; benchmarks/results/uhd_density_scifact.{json,npz}); the queries are the real SciFact test queries
encoded by that model. bm25s runs on real dictionary text (gcide + WordNet) of the same size.
Set-up once: `bash benchmarks/setup_search_speed.sh`.

    .venv/bin/python benchmarks/search_speed.py --max-docs 100000
    .venv/bin/python benchmarks/search_speed.py --recompute-stats --model out/quickstart/model

Prints a table and writes benchmarks/results/search_speed.json (one row per method, size and thread count).
Generated indexes are cached under --work-dir, keyed by size, seed and the density statistics. Settings (sizes,
methods, threads, Seismic's parameters) come from benchmarks/configs/search_speed.toml (--config).
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numba as nb
import numpy as np
import scipy.sparse as sp

from uhdsearch.sparse import SparseEncoding

sys.path.insert(0, str(Path(__file__).resolve().parent))
from settings import comma_list, parse_args, record  # noqa: E402
from synthetic import DensityProfile, SyntheticPostings  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
STATS_JSON = RESULTS_DIR / "uhd_density_scifact.json"
STATS_NPZ = RESULTS_DIR / "uhd_density_scifact.npz"
OUT_JSON = RESULTS_DIR / "search_speed.json"
K = 10
QUANTILES = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- real statistics
def compute_stats(model_dir: Path, stats_index: Path | None, batch_size: int) -> None:
    """Encode SciFact (bundled) with the trained model once; store density statistics and the query rows."""
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir

    model = UHDEncoder.from_pretrained(model_dir)
    data = load_beir(bundled_dataset_dir("scifact"), "test")
    t0 = time.perf_counter()
    if stats_index is not None:  # an index the same model built (e.g. the quickstart's): its vectors, no re-encoding
        documents, digest = _index_vectors(stats_index)
        if digest != model.digest():
            raise SystemExit(f"{stats_index} was built by encoder {digest}, not {model.digest()} "
                             f"({model_dir}); drop --stats-index to encode the corpus")
        source = f"vectors of {stats_index} (built by the same model)"
    else:
        texts = [d.full_text for d in data.corpus.values()]
        documents = model.encode_document(texts, batch_size=batch_size).buckets[0]
        source = f"encoded now ({len(texts)} documents, {time.perf_counter() - t0:.0f} s)"
    queries = model.encode_query([q.text for q in data.queries]).buckets[0]
    profile = DensityProfile.from_vectors(documents)
    q_active = np.diff(queries.indptr)
    df_sorted = np.sort(profile.doc_frequency)[::-1]
    stats = {
        "model": str(model_dir), "encoder_digest": model.digest(), "dataset": "scifact (bundled), test queries",
        "source": source, "dim": profile.dim, "wta_k": model.config.wta_k, "query_k": model.config.query_k,
        "document_max_length": model.config.document_max_length, "n_documents": int(documents.shape[0]),
        "n_queries": int(queries.shape[0]),
        "doc_active_dims": _summary(profile.doc_lengths, bins=np.arange(0, int(profile.doc_lengths.max()) + 250, 250)),
        "query_active_dims": _summary(q_active, bins=np.arange(0, int(q_active.max()) + 50, 50)),
        "df_share_sorted": {
            "note": "document frequency / n_documents of every dimension, sorted descending, at 257 evenly spaced ranks",
            "ranks": np.linspace(0, profile.dim - 1, 257).astype(int).tolist(),
            "shares": np.round(df_sorted[np.linspace(0, profile.dim - 1, 257).astype(int)], 6).tolist(),
            "dims_never_active": int((profile.doc_frequency == 0).sum()),
            "top_1pct_dims_posting_share": float(df_sorted[: profile.dim // 100].sum() / df_sorted.sum()),
        },
        "value_quantiles": {"q": list(np.linspace(0, 1, 11).round(2)),
                            "value": profile.value_quantiles[::100].round(6).tolist()},
        "query_touched_postings_per_document": float(np.mean(  # sum of the df shares of a query's dims
            [profile.doc_frequency[queries.indices[a:b]].sum() for a, b in zip(queries.indptr[:-1], queries.indptr[1:])]
        )),
        "arrays": STATS_NPZ.name,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(STATS_NPZ, doc_frequency=np.round(profile.doc_frequency * documents.shape[0]).astype(np.int32),
                        n_documents=np.int64(documents.shape[0]), doc_lengths=profile.doc_lengths.astype(np.int32),
                        value_quantiles=profile.value_quantiles, query_indptr=queries.indptr.astype(np.int64),
                        query_dims=queries.indices.astype(np.int32), query_values=queries.data.astype(np.float32),
                        query_ids=np.array([q.query_id for q in data.queries]))
    STATS_JSON.write_text(json.dumps(stats, indent=1) + "\n", encoding="utf-8")
    log(f"wrote {STATS_JSON} and {STATS_NPZ} ({STATS_NPZ.stat().st_size / 1e6:.2f} MB)")


def _index_vectors(directory: Path) -> tuple[sp.csr_matrix, str | None]:
    """Document vectors (bucket 0) of a weighted index: a loadable one, or the raw .npy of format version 1."""
    from uhdsearch.errors import IndexFormatError
    from uhdsearch.index.inverted import InvertedIndex

    try:
        index = InvertedIndex.load(directory)
        if index.variant != "weighted":
            raise SystemExit(f"{directory} is a {index.variant} index; the value distribution needs a weighted one")
        return index.document_vectors().buckets[0], index.encoder_digest
    except IndexFormatError:
        meta = json.loads((directory / "index_meta.json").read_text(encoding="utf-8"))
        if meta.get("format_version") != 1 or meta.get("variant") != "weighted":
            raise
        arrays = {name: np.load(directory / f"bucket_0.{name}.npy", allow_pickle=False)
                  for name in ("indptr", "docs", "weights")}
        csc = sp.csc_matrix((arrays["weights"], arrays["docs"], arrays["indptr"]),
                            shape=(meta["n_documents"], meta["dim"]))
        return csc.tocsr(), meta.get("encoder_digest")


def _summary(values: np.ndarray, bins: np.ndarray) -> dict:
    counts, edges = np.histogram(values, bins=bins)
    return {"mean": float(values.mean()), "quantiles": dict(zip(map(str, QUANTILES),
                                                               np.quantile(values, QUANTILES).round(1).tolist())),
            "histogram": {"edges": edges.astype(int).tolist(), "counts": counts.tolist()}}


def load_stats() -> tuple[DensityProfile, SparseEncoding, str]:
    with np.load(STATS_NPZ, allow_pickle=False) as z:
        n = int(z["n_documents"])
        profile = DensityProfile(z["doc_frequency"] / n, z["doc_lengths"], z["value_quantiles"])
        dim = profile.dim
        queries = sp.csr_matrix((z["query_values"], z["query_dims"], z["query_indptr"]),
                                shape=(z["query_indptr"].shape[0] - 1, dim))
        h = hashlib.sha256()  # of the contents: the .npz bytes carry zip timestamps
        for name in sorted(z.files):
            h.update(name.encode() + np.ascontiguousarray(z[name]).tobytes())
    digest = h.hexdigest()[:12]
    return profile, SparseEncoding([queries]), digest


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
            top, ties = _exact_top(scores_row.astype(np.float64))
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


def _exact_top(scores: np.ndarray, k: int = K, tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
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


# --------------------------------------------------------------------------- timing helpers
def single_query_ms(search, rows: list, n_warmup: int = 10) -> np.ndarray:
    for r in rows[:n_warmup]:
        search(r)
    times = []
    for r in rows:
        t0 = time.perf_counter()
        search(r)
        times.append((time.perf_counter() - t0) * 1e3)
    return np.array(times)


def copy_bandwidth_gb_s(n_bytes: int = 1 << 29, repeats: int = 5) -> float:
    """Best-of-`repeats` numpy copy of a buffer much larger than the caches; bytes copied per second."""
    a = np.ones(n_bytes // 8)
    b = np.empty_like(a)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return n_bytes / best / 1e9


def adder_two_thread_speedup(repeats: int = 5) -> float:
    """Speed-up of two threads over one on the binary kernel's bit-sliced adder over cache-resident bitmaps.

    A property of the machine, recorded next to the results: where two vCPUs share one physical core's SIMD
    units (a host's choice, seen to change between boots), no exact kernel can scale single queries there.
    """
    from concurrent.futures import ThreadPoolExecutor

    from uhdsearch.index.kernels.bitmaps import MAX_PLANES, accumulate_bitmaps
    from uhdsearch.index.kernels.ranges import CHUNK

    words, n_rows, passes = 313, 583, 400  # 20k documents x a real query's bitmap dims: ~1.5 MB, in L2/L3

    @nb.njit(nogil=True)
    def scan(bitmaps, bases, planes, carry):  # pragma: no cover - compiled
        for _ in range(passes):
            accumulate_bitmaps(bitmaps, bases, words, 0, 10, planes, CHUNK // 64, carry)

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
            times = single_query_ms(search, singles, n_warmup=10 if n_docs <= 100_000 else 3)
            t0 = time.perf_counter()
            numbers, _ = search(queries)
            qps = queries.n / (time.perf_counter() - t0)
            numbers = numbers[: top.shape[0], :K]  # the batch answers are checked against the oracle
            identical = bool(np.array_equal(numbers, top))
            rows.append(row(f"uhd-{scoring}", n_docs, t, times, qps, per_doc, recall_vs_exact(numbers, ties),
                            floor, bytes_per_posting=round(per_posting, 3), disk_bytes_per_doc=round(disk / n_docs, 1),
                            open_ms=round(open_ms, 1), warm_up_ms=None if warm_up_ms is None else round(warm_up_ms, 1),
                            identical_to_oracle=identical, n_oracle_queries=int(top.shape[0]), **probe))
            log(_fmt(rows[-1]))
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
            return np.stack([_exact_top(s.astype(np.float64))[0] for s in scores])
        singles = [q[i:i + 1] for i in range(q.shape[0])]
        top, ties = load_oracle(directory, scoring, queries.n)
        numbers = top_of(q[: top.shape[0]])
        times = single_query_ms(top_of, singles)
        t0 = time.perf_counter()
        for start in range(0, q.shape[0], 32):
            top_of(q[start:start + 32])
        qps = q.shape[0] / (time.perf_counter() - t0)
        rows.append(row("scipy", n_docs, 1, times, qps, (need - (nnz * 4 if scoring == "binary" else 0)) / n_docs,
                        recall_vs_exact(numbers, ties), floor, scoring=scoring,
                        identical_to_oracle=bool(np.array_equal(numbers, top))))
        log(_fmt(rows[-1]))
    del matrix
    gc.collect()
    return rows


def bench_seismic(directory: Path, queries: SparseEncoding, n_docs: int, floor: float, timeout_s: float,
                  mem_gb: float, n_postings: list[int], build: dict, search: list[dict],
                  scoring_note: str = "weighted vectors (dot product)") -> list[dict]:
    """Seismic (pyseismic-lsr SeismicIndexRawLV: u32 dimension ids) on the weighted vectors, built in a
    subprocess capped in time and address space, once per n_postings with the other `build` parameters and
    searched with each of `search`; approximate, so recall is measured against the oracle."""
    try:
        import seismic  # noqa: F401
    except ImportError:
        return [row("seismic", n_docs, 1, None, None, None, None, floor,
                    note="skipped: pyseismic-lsr is not installed (bash benchmarks/setup_search_speed.sh)")]
    if not (directory / "raw_docs.npy").is_file():
        return [row("seismic", n_docs, 1, None, None, None, None, floor,
                    note="skipped: raw vectors not kept at this size (--raw-max-gb)")]
    docs_bin = directory / "seismic_docs.bin"
    if not docs_bin.is_file():
        _write_seismic_docs(directory, n_docs, docs_bin)
    top, ties = load_oracle(directory, "weighted", queries.n)
    q = queries.buckets[0]
    np.savez(directory / "seismic_queries.npz", indptr=q.indptr, dims=q.indices, values=q.data,
             n_oracle=top.shape[0])
    rows = []
    for config in [dict(build, n_postings=n) for n in n_postings]:
        result_path = directory / "seismic_result.json"
        result_path.unlink(missing_ok=True)
        Path(str(result_path) + ".progress").unlink(missing_ok=True)
        job = {"docs": str(docs_bin), "queries": str(directory / "seismic_queries.npz"), "out": str(result_path),
               "build": config, "search": list(search), "mem_gb": mem_gb}
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, __file__, "--seismic-worker", json.dumps(job)], capture_output=True,
                                  text=True, timeout=timeout_s)
            status = f"exit {proc.returncode}" + ("" if proc.returncode == 0 else f": {proc.stderr.strip()[-300:]}")
        except subprocess.TimeoutExpired as exc:
            progress = Path(job["out"] + ".progress")
            stage = (f"build finished in {json.loads(progress.read_text())['build_s']} s, search"
                     if progress.is_file() else "build")
            output = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            last = [line for line in output.splitlines() if line.strip()][-1:] or ["(no output)"]
            status = f"{stage} did not finish within {timeout_s:.0f} s (--seismic-timeout); last log line: {last[0]}"
        elapsed = time.perf_counter() - t0
        if not result_path.is_file():
            rows.append(row("seismic", n_docs, 1, None, None, None, None, floor, seismic_build=config,
                            note=f"failed: {status}; address space capped at {mem_gb:.0f} GB; {elapsed:.0f} s"))
            log(_fmt(rows[-1]))
            continue
        result = json.loads(result_path.read_text())
        for s in result["searches"]:
            numbers = np.array(s["numbers"][: top.shape[0]])
            rows.append(row("seismic", n_docs, 1, np.array(s["times_ms"]), s["qps_batch"],
                            result["bytes"] / n_docs if result.get("bytes") else None,
                            recall_vs_exact(numbers, ties), floor, seismic_build=config, seismic_search=s["params"],
                            build_s=result["build_s"], build_max_rss_gb=result["max_rss_gb"], note=scoring_note))
            log(_fmt(rows[-1]))
    return rows


def _write_seismic_docs(directory: Path, n_docs: int, path: Path) -> None:
    """Seismic's inner format: u32 n; per document u32 length, u32 dims, f32 values (from CSC postings)."""
    indptr = np.load(directory / "raw_indptr.npy")
    csc = sp.csc_matrix((np.load(directory / "raw_weights.npy", mmap_mode="r"),
                         np.load(directory / "raw_docs.npy", mmap_mode="r"), indptr), shape=(n_docs, indptr.shape[0] - 1))
    with open(path, "wb") as f:
        f.write(np.uint32(n_docs).tobytes())
        for start in range(0, n_docs, 10_000):
            part = csc[start:start + 10_000].tocsr()  # column-sliced rows; sorted dims
            part.sort_indices()
            write_seismic_rows(part, f)


def write_seismic_rows(docs: sp.csr_matrix, f) -> None:
    """Each row in Seismic's inner format: u32 length, u32 dims, f32 values (the u32 count comes first)."""
    for i in range(docs.shape[0]):
        a, b = docs.indptr[i], docs.indptr[i + 1]
        f.write(np.uint32(b - a).tobytes())
        f.write(docs.indices[a:b].astype(np.uint32).tobytes())
        f.write(docs.data[a:b].astype(np.float32).tobytes())


def seismic_worker(job: dict) -> None:
    cap = int(job["mem_gb"] * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import seismic

    t0 = time.perf_counter()
    index = seismic.SeismicIndexRawLV.build(job["docs"], **job["build"])
    build_s = time.perf_counter() - t0
    Path(job["out"] + ".progress").write_text(json.dumps({"build_s": round(build_s, 1)}))
    with np.load(job["queries"], allow_pickle=False) as z:
        indptr, dims, values = z["indptr"], z["dims"].astype(np.int32), z["values"].astype(np.float32)
    queries = [(dims[a:b], values[a:b]) for a, b in zip(indptr[:-1], indptr[1:])]
    searches = []
    for params in job["search"]:
        def search(qv, params=params):
            return index.search(qv[0], qv[1], K, params["query_cut"], params["heap_factor"], 0, True)
        times = single_query_ms(search, queries)
        t0 = time.perf_counter()
        results = [search(qv) for qv in queries]
        qps = len(queries) / (time.perf_counter() - t0)
        numbers = [[int(d) for _, d in r] + [-1] * (K - len(r)) for r in results]
        searches.append({"params": params, "times_ms": times.tolist(), "qps_batch": qps, "numbers": numbers})
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out = {"build_s": round(build_s, 1), "max_rss_gb": round(usage, 2), "searches": searches,
           "bytes": None}
    Path(job["out"]).write_text(json.dumps(out))


# --------------------------------------------------------------------------- bm25s on real text
def dictionary_texts(n: int, seed: int) -> tuple[list[str], str]:
    """n real-text documents from GCIDE and WordNet (Debian dict-gcide, wordnet-base). Entries first; beyond
    their count, entries split into senses and WordNet glosses into parts; beyond that, pairs of units."""
    import gzip
    import re

    gcide_dict, gcide_index = Path("/usr/share/dictd/gcide.dict.dz"), Path("/usr/share/dictd/gcide.index")
    if not gcide_dict.is_file():
        raise SystemExit("dict-gcide is not installed: bash benchmarks/setup_search_speed.sh")
    raw = gzip.open(gcide_dict).read()
    alphabet = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}

    def b64(s: str) -> int:
        v = 0
        for ch in s:
            v = v * 64 + alphabet[ch]
        return v
    spans = set()
    for line in gcide_index.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and not parts[0].startswith("00-database"):
            spans.add((b64(parts[1]), b64(parts[2])))
    entries = [raw[a:a + b].decode("utf-8", "replace") for a, b in sorted(spans)]
    glosses = []
    for pos in ("noun", "verb", "adj", "adv"):
        for line in Path(f"/usr/share/wordnet/data.{pos}").read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.startswith(" ") and " | " in line:
                head, gloss = line.split(" | ", 1)
                words = head.split()[4:4 + 2 * int(head.split()[3], 16):2]
                glosses.append(" ".join(w.replace("_", " ") for w in words) + ": " + gloss.strip())
    units = entries + glosses
    how = f"{len(entries):,} GCIDE entries + {len(glosses):,} WordNet synsets"
    if n > len(units):
        senses = [s for e in entries for s in re.split(r"\n\s*\d+\.\s", e) if s.strip()]
        parts = [p for g in glosses for p in g.split("; ") if p.strip()]
        units = senses + parts
        how = f"{len(senses):,} GCIDE senses + {len(parts):,} WordNet gloss parts"
    rng = np.random.default_rng(seed)
    if n > len(units):
        extra = n - len(units)
        a, b = rng.integers(0, len(units), extra), rng.integers(0, len(units), extra)
        units = units + [units[i] + "\n" + units[j] for i, j in zip(a, b)]
        how += f" + {extra:,} random pairs of them"
    chosen = rng.permutation(len(units))[:n]
    return [units[i] for i in chosen], how


def bench_bm25s(n_docs: int, n_queries: int, seed: int) -> list[dict]:
    import bm25s

    texts, how = dictionary_texts(n_docs, seed)
    rng = np.random.default_rng(seed + 1)
    queries = []  # 2-5 consecutive words of a random document: a short phrase a user might type
    while len(queries) < n_queries:
        words = texts[int(rng.integers(len(texts)))].split()
        if len(words) >= 6:
            start, length = int(rng.integers(0, len(words) - 5)), int(rng.integers(2, 6))
            queries.append(" ".join(words[start:start + length]))
    t0 = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    build_s = time.perf_counter() - t0
    size = sum(a.nbytes for a in retriever.scores.values() if isinstance(a, np.ndarray))
    tokens = [bm25s.tokenize([qt], stopwords="en", show_progress=False, return_ids=False)[0] for qt in queries]

    def search(tok):
        return retriever.retrieve([tok], k=K, show_progress=False, n_threads=1)
    times = single_query_ms(search, tokens)
    t0 = time.perf_counter()
    retriever.retrieve(tokens, k=K, show_progress=False, n_threads=1)
    qps = len(tokens) / (time.perf_counter() - t0)
    out = row("bm25s", n_docs, 1, times, qps, size / n_docs, 1.0, None, build_s=round(build_s, 1),
              note=f"real text: {how}; queries: 2-5 word phrases from random documents; exact BM25 (its own "
                   "scores), timing excludes query tokenization, as the uhd rows exclude query encoding")
    log(_fmt(out))
    return [out]


# --------------------------------------------------------------------------- driver
def _fmt(r: dict) -> str:
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
    parser.add_argument("--seismic-worker", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args, config, settings = parse_args(parser, "search_speed", argv)
    if args.seismic_worker:
        return seismic_worker(json.loads(args.seismic_worker))

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
        print(_fmt(r))
    print(f"copy bandwidth: {bandwidth:.1f} GB/s; floor = touched postings x 4 B / bandwidth (median over queries)")
    for line in ratios(rows):
        print(line)
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "copy_bandwidth_gb_s": round(bandwidth, 2),
               "stats": STATS_JSON.name, "command": " ".join(sys.argv), **record(config, settings)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([dict(r, machine=machine) for r in rows], indent=1) + "\n", encoding="utf-8")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
