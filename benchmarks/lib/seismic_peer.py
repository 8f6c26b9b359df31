"""Seismic (pyseismic-lsr) as a peer of the search-speed benchmark, built and searched in a capped subprocess
(this module is the subprocess's entry point: `python -m benchmarks.lib.seismic_peer JOB_JSON`)."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.lib.settings import ROOT
from benchmarks.lib.speed_common import K, fmt, load_oracle, log, recall_vs_exact, row
from benchmarks.lib.timer import time_calls
from uhdsearch.sparse import SparseEncoding


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
                    note="skipped: pyseismic-lsr is not installed (bash benchmarks/speed/setup_search_speed.sh)")]
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
            proc = subprocess.run([sys.executable, "-m", "benchmarks.lib.seismic_peer", json.dumps(job)], cwd=ROOT,
                                  capture_output=True, text=True, timeout=timeout_s)
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
            log(fmt(rows[-1]))
            continue
        result = json.loads(result_path.read_text())
        for s in result["searches"]:
            numbers = np.array(s["numbers"][: top.shape[0]])
            rows.append(row("seismic", n_docs, 1, np.array(s["times_ms"]), s["qps_batch"],
                            result["bytes"] / n_docs if result.get("bytes") else None,
                            recall_vs_exact(numbers, ties), floor, seismic_build=config, seismic_search=s["params"],
                            build_s=result["build_s"], build_max_rss_gb=result["max_rss_gb"], note=scoring_note))
            log(fmt(rows[-1]))
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
        times = time_calls(search, queries, n_warmup=10)
        t0 = time.perf_counter()
        results = [search(qv) for qv in queries]
        qps = len(queries) / (time.perf_counter() - t0)
        numbers = [[int(d) for _, d in r] + [-1] * (K - len(r)) for r in results]
        searches.append({"params": params, "times_ms": times.tolist(), "qps_batch": qps, "numbers": numbers})
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out = {"build_s": round(build_s, 1), "max_rss_gb": round(usage, 2), "searches": searches,
           "bytes": None}
    Path(job["out"]).write_text(json.dumps(out))



if __name__ == "__main__":
    seismic_worker(json.loads(sys.argv[1]))
