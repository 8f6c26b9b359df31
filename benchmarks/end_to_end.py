"""End-to-end latency (query encoding + search, as the paper's Table 3 counts it) over real text (issue 4, item 7).

The trained quickstart model encodes N dictionary definitions (GCIDE + WordNet, see search_speed.py), the
binarized index is built, then SciFact test queries are run one at a time: encode, query_k truncation, exact
top-10. bm25s over the same texts with the same queries (tokenization included) is the peer in the same run.
Set-up once: `bash benchmarks/setup_search_speed.sh` (the dictionaries).

    .venv/bin/python benchmarks/end_to_end.py [--n-docs 100000] [--model out/quickstart/model] [--threads 2]

Prints a table and writes benchmarks/results/end_to_end.json (end_to_end_torch.json with --runtime torch). Encoded
indexes are cached under --work-dir. Settings come from benchmarks/configs/end_to_end.toml (--config).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed_peers import dictionary_texts  # noqa: E402
from settings import parse_args, record  # noqa: E402

from uhdsearch.encoder.model import UHDEncoder  # noqa: E402
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir  # noqa: E402
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "end_to_end.json"


def percentiles(ms: list[float]) -> dict:
    return {"p50_ms": float(np.median(ms)), "p95_ms": float(np.percentile(ms, 95))}


def build_index(model: UHDEncoder, n_docs: int, work_dir: Path, batch_size: int) -> tuple[InvertedIndex, float, list[str]]:
    texts, how = dictionary_texts(n_docs, seed=0)
    path = work_dir / f"index-{model.digest()}-{n_docs}"
    if path.exists():
        meta = json.loads((path / "end_to_end.json").read_text())
        return BinaryIndex.load(path), meta["docs_per_s"], texts
    start = time.perf_counter()
    encoding = model.encode_document(texts, batch_size=batch_size, show_progress=True)
    docs_per_s = n_docs / (time.perf_counter() - start)
    index = BinaryIndex.from_encoding(encoding, [f"d{i}" for i in range(n_docs)], path, model.digest())
    (path / "end_to_end.json").write_text(json.dumps({"docs_per_s": docs_per_s, "texts": how}))
    return index, docs_per_s, texts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-docs", type=int, help="dictionary definitions encoded and indexed")
    parser.add_argument("--model", default="out/quickstart/model", help="(default: %(default)s)")
    parser.add_argument("--threads", type=int, help="torch, ONNX Runtime and the search kernel")
    parser.add_argument("--query-k", help="an int, 'none' or 'config' (the model's own)")
    parser.add_argument("--n-queries", type=int, help="SciFact test queries timed")
    parser.add_argument("--batch-size", type=int, help="document encoding batch")
    parser.add_argument("--work-dir", default="out/end_to_end", help="encoded indexes are cached here "
                        "(default: %(default)s)")
    parser.add_argument("--runtime", choices=("torch", "onnx"),
                        help="the query-side backbone: PyTorch eager or ONNX Runtime (UHDEncoder.use_onnx_runtime)")
    return parser


def main() -> None:
    args, config, settings = parse_args(build_parser(), "end_to_end")
    torch.set_num_threads(args.threads)
    model = UHDEncoder.from_pretrained(args.model)
    # encode_query's None is the model's own query_k; keeping dim dims keeps every active one
    query_k = {"config": None, "none": model.config.dim}.get(args.query_k.lower())
    if args.query_k.lower() not in ("config", "none"):
        query_k = int(args.query_k)
    model.eval()
    index, docs_per_s, texts = build_index(model, args.n_docs, Path(args.work_dir), args.batch_size)
    queries = [q.text for q in load_beir(bundled_dataset_dir("scifact"), split="test").queries][: args.n_queries]
    if args.runtime == "onnx":  # after the document encoding: ONNX Runtime only pays off for short inputs
        model.use_onnx_runtime(threads=args.threads)

    encode_ms, search_ms, total_ms, active = [], [], [], []
    for text in queries[:10] + queries:  # the first ten warm up
        t0 = time.perf_counter()
        encoded = model.encode_query([text], query_k=query_k)
        t1 = time.perf_counter()
        index.search_encoded(encoded, 10, [1.0] * index.n_buckets, "binary", n_threads=args.threads)
        t2 = time.perf_counter()
        encode_ms.append(1000 * (t1 - t0))
        search_ms.append(1000 * (t2 - t1))
        total_ms.append(1000 * (t2 - t0))
        active.append(int(sum(b.nnz for b in encoded.buckets)))
    encode_ms, search_ms, total_ms, active = (x[10:] for x in (encode_ms, search_ms, total_ms, active))

    import bm25s

    retriever = bm25s.BM25(k1=0.9, b=0.4)
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    bm25_ms = []
    for text in queries[:10] + queries:
        t0 = time.perf_counter()
        tokens = bm25s.tokenize([text], stopwords="en", show_progress=False)
        retriever.retrieve(tokens, k=10, show_progress=False, n_threads=1)
        bm25_ms.append(1000 * (time.perf_counter() - t0))
    bm25_ms = bm25_ms[10:]

    result = {
        "n_docs": args.n_docs, "threads": args.threads, "model": str(args.model), "query_k": args.query_k,
        "runtime": args.runtime,
        "docs_per_s_encoding": docs_per_s, "index_bytes_per_doc": index.bytes_per_document(),
        "postings_per_doc": index.n_postings() / index.n_documents, "query_active_dims_p50": float(np.median(active)),
        "uhd_encode": percentiles(encode_ms), "uhd_search": percentiles(search_ms), "uhd_total": percentiles(total_ms),
        "bm25s_total": percentiles(bm25_ms), **record(config, settings),
    }
    print(f"{args.n_docs:,} real-text documents, {args.threads} threads, encoding {docs_per_s:.0f} docs/s, "
          f"{result['postings_per_doc']:.0f} postings/doc, {result['index_bytes_per_doc']:.0f} bytes/doc")
    print(f"{'stage':<22} {'p50 ms':>8} {'p95 ms':>8}")
    for name in ("uhd_encode", "uhd_search", "uhd_total", "bm25s_total"):
        print(f"{name:<22} {result[name]['p50_ms']:>8.2f} {result[name]['p95_ms']:>8.2f}")
    print(f"uhd total / bm25s total (p50): {result['uhd_total']['p50_ms'] / result['bm25s_total']['p50_ms']:.2f}")
    out = RESULTS if args.runtime == "onnx" else RESULTS.with_name("end_to_end_torch.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
