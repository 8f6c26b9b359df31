"""Encoding throughput of the UHD encoder on this CPU, and the WTA layer's share of it (issue 4, item 7).

For each setting: documents per second through the backbone alone and through backbone + WTA head, and the
median latency of encoding one query, with the backbone in PyTorch and through ONNX Runtime
(`UHDEncoder.use_onnx_runtime`). Settings: dim 32,768 and 81,920, projection in float32 and bfloat16.

    .venv/bin/python -m benchmarks.speed.encoding_speed [--n-docs 256] [--doc-length 256]

Prints a table and writes benchmarks/results/encoding_speed.json. Settings come from
benchmarks/configs/encoding_speed.toml (--config); options override single ones.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics

import torch

from benchmarks.lib.settings import RESULTS, comma_list, parse_args, record
from benchmarks.lib.timer import median_seconds
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir

RESULT_JSON = RESULTS / "encoding_speed.json"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-docs", type=int, help="SciFact documents encoded per timing")
    parser.add_argument("--doc-length", type=int, help="document token limit")
    parser.add_argument("--repeats", type=int, help="timings per setting; the median counts")
    parser.add_argument("--dims", type=comma_list(int), help="comma-separated")
    return parser


def main() -> None:
    args, config, settings = parse_args(build_parser(), "encoding_speed")
    torch.manual_seed(0)
    data = load_beir(bundled_dataset_dir("scifact"), split="test")
    texts = [d.full_text for d in list(data.corpus.values())[: args.n_docs]]
    queries = [q.text for q in data.queries[: args.n_queries]]
    backbone = Backbone.from_pretrained(None)
    backbone.eval()

    def backbone_only() -> None:
        with torch.inference_mode():
            for start in range(0, len(texts), args.batch_size):
                batch = backbone.tokenize(texts[start : start + args.batch_size], args.doc_length)
                backbone(batch["input_ids"], batch["attention_mask"], [backbone.n_layers])

    backbone_s = median_seconds(backbone_only, args.repeats)
    rows = [{"setting": "backbone only", "docs_per_s": len(texts) / backbone_s, "wta_share": 0.0,
             "query_ms_p50": None}]
    for dim in args.dims:
        for dtype in args.dtypes:
            encoder_config = EncoderConfig(dim=dim, wta_k=args.wta_k, query_k=args.query_k,
                                           document_max_length=args.doc_length, wta_dtype=dtype)
            encoder = UHDEncoder(backbone, encoder_config)
            encoder.eval()
            seconds = median_seconds(lambda: encoder.encode_document(texts, batch_size=args.batch_size, show_progress=False),
                            args.repeats)
            query_ms = [1000 * median_seconds(lambda q=q: encoder.encode_query([q]), 1) for q in queries]
            encoder.use_onnx_runtime()
            onnx_ms = [1000 * median_seconds(lambda q=q: encoder.encode_query([q]), 1) for q in queries]
            rows.append({"setting": f"dim {dim}, {dtype}", "docs_per_s": len(texts) / seconds,
                         "wta_share": max(0.0, 1 - backbone_s / seconds),
                         "query_ms_p50": statistics.median(query_ms), "query_ms_p50_onnx": statistics.median(onnx_ms)})
            del encoder
    print(f"{'setting':<24} {'docs/s':>8} {'WTA share':>10} {'query p50 ms':>13} {'with ONNX':>10}")
    for row in rows:
        q = "" if row["query_ms_p50"] is None else f"{row['query_ms_p50']:.1f}"
        o = "" if row.get("query_ms_p50_onnx") is None else f"{row['query_ms_p50_onnx']:.1f}"
        print(f"{row['setting']:<24} {row['docs_per_s']:>8.1f} {row['wta_share']:>10.0%} {q:>13} {o:>10}")
    RESULT_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULT_JSON.write_text(json.dumps({"n_docs": len(texts), "doc_length": args.doc_length,
                                   "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine(),
                                   **record(config, settings), "rows": rows}, indent=2) + "\n")
    print(f"wrote {RESULT_JSON}")


if __name__ == "__main__":
    main()
