"""Scale figures: encoding throughput single-process vs Ray actors; sharded search on Ray vs one index.

Encoding: `encode_docs` SciFact documents from a saved model directory to an index on disk, once in this process
(torch on all cores; `BinaryIndex.build`) and once with `build_on_ray` on `workers` actors of a local Ray cluster
with all cores (its time includes starting the actors, loading the model in each and the driver's segment writes).
Search: a seeded synthetic binary index (`n_docs` documents, `doc_active` uniform active dims each), split into
1/2/4 shards on Ray actors (1 numba thread each, all up at once); p50 of single queries and the median throughput
of `batch_repeats` batches of `n_queries`, against the unsharded index searched in this process with 1 thread (the
merge-overhead peer) and with all cores. Systems are timed interleaved, query by query in a rotated order, so the
load of other jobs drifts alike over all; every single-query and batch result is checked against the peer's.
Prints a table, writes benchmarks/results/scale.json (with the load average); settings from
benchmarks/configs/scale.toml.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.lib.settings import RESULTS, comma_list, parse_args, record

RESULT_JSON = RESULTS / "scale.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model")
    for name in ("encode-docs", "workers", "n-docs", "dim", "doc-active", "query-active", "n-queries", "batch-repeats",
                 "k", "seed"):
        p.add_argument(f"--{name}", type=int)
    p.add_argument("--shards", type=comma_list(int))
    p.add_argument("--work-dir", help="where the temporary indexes go (default: the system's temp dir)")
    p.add_argument("--out", type=Path, default=RESULT_JSON, help="result JSON")
    return p


def random_rows(n: int, dim: int, active: int, rng: np.random.Generator) -> sp.csr_matrix:
    """n rows with `active` distinct uniform dims each (duplicates summed away: a few rows have fewer)."""
    indices = np.sort(rng.integers(0, dim, size=(n, active), dtype=np.int32), axis=1)
    m = sp.csr_matrix((np.ones(n * active, np.float32), indices.ravel(), np.arange(0, n * active + 1, active)),
                      shape=(n, dim))
    m.sum_duplicates()
    m.data[:] = 1.0
    return m


def bench_encoding(args, work: Path) -> list[dict]:
    """Model directory + documents -> index on disk, both ways (model load and index writes counted in each)."""
    import torch

    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
    from uhdsearch.index.inverted import BinaryIndex
    from uhdsearch.scale.cluster import connect
    from uhdsearch.scale.ray_index import build_on_ray

    model_dir = Path(args.model) if args.model else work / "model"
    if not args.model:
        UHDEncoder.new().save_pretrained(model_dir)
    docs = list(load_beir(bundled_dataset_dir("scifact"), "test").corpus.values())[:args.encode_docs]
    torch.set_num_threads(os.cpu_count())  # the same cores as the Ray actors together, whatever OMP_NUM_THREADS says
    start = time.perf_counter()
    single_index = BinaryIndex.build(UHDEncoder.from_pretrained(model_dir), docs, work / "single-index",
                                     show_progress=False)
    single = time.perf_counter() - start
    rows = [{"what": "encode", "system": f"single process ({torch.get_num_threads()} torch threads)",
             "n_docs": len(docs), "docs_per_s": len(docs) / single, "seconds": single, "load": os.getloadavg()}]
    print(f"encoded {len(docs)} documents in one process in {single:.0f} s", file=sys.stderr)
    connect(None, num_cpus=os.cpu_count())
    start = time.perf_counter()
    ray_index = build_on_ray(model_dir, docs, work / "ray-index", n_workers=args.workers, show_progress=False)
    ray_s = time.perf_counter() - start
    same_size = ray_index.n_documents == single_index.n_documents
    rows.append({"what": "encode", "system": f"ray, {args.workers} actors", "n_docs": len(docs),
                 "docs_per_s": len(docs) / ray_s, "seconds": ray_s, "ratio_to_single": single / ray_s,
                 "same_n_documents": same_size, "load": os.getloadavg()})
    ray_index.close()
    return rows


def bench_search(args, work: Path) -> list[dict]:
    from uhdsearch.index.inverted import BinaryIndex
    from uhdsearch.scale.shards import ShardedIndex, split_index
    from uhdsearch.sparse import SparseEncoding

    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    index = BinaryIndex.from_encoding(SparseEncoding([random_rows(args.n_docs, args.dim, args.doc_active, rng)]),
                                      [f"d{i}" for i in range(args.n_docs)], work / "whole")
    queries = SparseEncoding([random_rows(args.n_queries, args.dim, args.query_active, rng)])
    print(f"built {args.n_docs:,} documents in {time.perf_counter() - start:.0f} s, driver peak RSS "
          f"{peak_rss_gb():.1f} GB", file=sys.stderr)

    def same(a: tuple, b: tuple) -> bool:
        return bool(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]))

    cores = os.cpu_count()
    systems = {"one index, in process, 1 thread": (0, lambda q: index.search_encoded(q, args.k, [1.0], "binary",
                                                                                    n_threads=1)),
               f"one index, in process, {cores} threads": (0, lambda q: index.search_encoded(
                   q, args.k, [1.0], "binary", n_threads=cores))}
    sharded = [ShardedIndex(split_index(index, n, work / f"shards-{n}")) for n in args.shards]
    for n, s in zip(args.shards, sharded):
        systems[f"ray, {n} shard actors"] = (n, lambda q, s=s: s.search_encoded(q, args.k, [1.0], "binary"))
    print(f"{len(sharded)} sharded indexes up, driver peak RSS {peak_rss_gb():.1f} GB", file=sys.stderr)
    names = list(systems)
    load_before = os.getloadavg()
    for _, search in systems.values():
        search(queries)  # warm-up: numba compile, page faults
    # Interleaved, each round in a rotated order: the other jobs' load drifts alike over every system.
    times: dict[str, list] = {name: [] for name in names}
    singles: dict[str, list] = {name: [] for name in names}
    batch_qps: dict[str, list] = {name: [] for name in names}
    batches: dict[str, list] = {name: [] for name in names}
    for i in range(queries.n):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t = time.perf_counter()
            singles[name].append(systems[name][1](queries[i:i + 1]))
            times[name].append(time.perf_counter() - t)
    for r in range(args.batch_repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t = time.perf_counter()
            batches[name].append(systems[name][1](queries))
            batch_qps[name].append(queries.n / (time.perf_counter() - t))
    for s in sharded:
        s.close()
    peer = names[0]
    p50 = {name: float(np.median(times[name]) * 1000) for name in names}
    qps = {name: float(np.median(batch_qps[name])) for name in names}
    rows = []
    for name in names:
        row = {"what": "search", "system": name, "shards": systems[name][0], "p50_ms": p50[name], "qps": qps[name]}
        if name != peer:
            row.update({"p50_ratio_to_one_index": p50[name] / p50[peer],
                        "qps_ratio_to_one_index": qps[name] / qps[peer],
                        "identical_results": all(map(same, singles[name], singles[peer]))
                        and all(same(b, batches[peer][0]) for b in batches[name])})
        rows.append(row)
    rows[0]["load_before"], rows[-1]["load"] = load_before, os.getloadavg()
    return rows


def peak_rss_gb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def main(argv: list[str] | None = None) -> None:
    args, config, settings = parse_args(build_parser(), "scale", argv)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="uhd-scale-", dir=args.work_dir) as tmp:
        rows = (bench_encoding(args, Path(tmp)) if args.encode_docs else []) + bench_search(args, Path(tmp))
    for r in rows:
        print(" | ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"load_average_at_start": load, "load_average_at_end": os.getloadavg(),
                                    "cpu_count": os.cpu_count(), "driver_peak_rss_gb": peak_rss_gb(),
                                    **record(config, settings), "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
