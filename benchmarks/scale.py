"""Scale figures: encoding throughput single-process vs Ray actors; sharded search on Ray vs one index.

Encoding: `encode_docs` SciFact documents, docs/s of UHDEncoder.encode_document in this process (torch's threads)
against build_on_ray with `workers` actors (Ray already started; the time includes the driver's segment writes).
Search: a seeded synthetic binary index (`n_docs` documents, `doc_active` uniform active dims each), split into
1/2/4 shards on Ray actors (1 numba thread each); p50 of single queries and throughput of one batch of
`n_queries`, each against the unsharded index searched in this process with 1 thread (the merge-overhead peer).
Prints a table, writes benchmarks/results/scale.json; settings from benchmarks/configs/scale.toml.
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

sys.path.insert(0, str(Path(__file__).parent))
from settings import comma_list, parse_args, record  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "scale.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model")
    for name in ("encode-docs", "workers", "n-docs", "dim", "doc-active", "query-active", "n-queries", "k", "seed"):
        p.add_argument(f"--{name}", type=int)
    p.add_argument("--shards", type=comma_list(int))
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
    import torch

    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import load_beir
    from uhdsearch.scale.cluster import connect
    from uhdsearch.scale.ray_index import build_on_ray

    model_dir = Path(args.model) if args.model else work / "model"
    if not args.model:
        UHDEncoder.new().save_pretrained(model_dir)
    model = UHDEncoder.from_pretrained(model_dir)
    docs = list(load_beir(Path(__file__).parents[1] / "src/uhdsearch/data/scifact", "test").corpus.values())
    docs = docs[:args.encode_docs]
    start = time.perf_counter()
    model.encode_document([d.full_text for d in docs], show_progress=False)
    single = time.perf_counter() - start
    connect(None, num_cpus=os.cpu_count())
    start = time.perf_counter()
    build_on_ray(model_dir, docs, work / "ray-index", n_workers=args.workers, show_progress=False)
    ray_s = time.perf_counter() - start
    return [{"what": "encode", "system": f"single process ({torch.get_num_threads()} torch threads)",
             "docs_per_s": len(docs) / single, "seconds": single},
            {"what": "encode", "system": f"ray, {args.workers} actors", "docs_per_s": len(docs) / ray_s,
             "seconds": ray_s, "ratio_to_single": single / ray_s}]


def bench_search(args, work: Path) -> list[dict]:
    from uhdsearch.index.inverted import BinaryIndex
    from uhdsearch.scale.shards import ShardedIndex, split_index
    from uhdsearch.sparse import SparseEncoding

    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    index = BinaryIndex.from_encoding(SparseEncoding([random_rows(args.n_docs, args.dim, args.doc_active, rng)]),
                                      [f"d{i}" for i in range(args.n_docs)], work / "whole")
    queries = SparseEncoding([random_rows(args.n_queries, args.dim, args.query_active, rng)])
    print(f"built {args.n_docs:,} documents in {time.perf_counter() - start:.0f} s", file=sys.stderr)

    def measure(search) -> tuple[float, float, tuple]:
        search(queries[:1])  # warm-up: numba compile, page faults
        times = []
        for i in range(queries.n):
            t = time.perf_counter()
            search(queries[i:i + 1])
            times.append(time.perf_counter() - t)
        t = time.perf_counter()
        result = search(queries)
        return float(np.median(times) * 1000), queries.n / (time.perf_counter() - t), result

    local = lambda q: index.search_encoded(q, args.k, [1.0], "binary", n_threads=1)  # noqa: E731
    p50, qps, expected = measure(local)
    rows = [{"what": "search", "system": "one index, in process, 1 thread", "shards": 0, "p50_ms": p50, "qps": qps}]
    for n in args.shards:
        sharded = ShardedIndex(split_index(index, n, work / f"shards-{n}"))
        p50_n, qps_n, got = measure(lambda q, s=sharded: s.search_encoded(q, args.k, [1.0], "binary"))
        sharded.close()
        same = bool(np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]))
        rows.append({"what": "search", "system": f"ray, {n} shard actors", "shards": n, "p50_ms": p50_n,
                     "qps": qps_n, "p50_ratio_to_one_index": p50_n / p50, "qps_ratio_to_one_index": qps_n / qps,
                     "identical_results": same})
    return rows


def main(argv: list[str] | None = None) -> None:
    args, config, settings = parse_args(build_parser(), "scale", argv)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="uhd-scale-") as tmp:
        rows = bench_encoding(args, Path(tmp)) + bench_search(args, Path(tmp))
    for r in rows:
        print(" | ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"load_average_at_start": load, "load_average_at_end": os.getloadavg(),
                                   "cpu_count": os.cpu_count(), **record(config, settings), "rows": rows},
                                  indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
