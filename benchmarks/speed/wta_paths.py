"""The WTA product's paths on this CPU (encoder/precision.py) and what a dev check costs (training/dev_checks.py).

Document encoding from cached backbone states with the quickstart's head (dim 32,768, wta_k 40, 256 tokens):
float32 (the ceiling: no rounding), bfloat16 native, bfloat16 emulated; and a quickstart dev check three ways:
as before (documents re-encoded, queries through the backbone), on a new head, and on a head seen before with a
new query token limit (how the head and query limit are chosen).

    .venv/bin/python -m benchmarks.speed.wta_paths [--n-docs 200]

Prints a table and writes benchmarks/results/wta_paths.json (with the CPU record; --out another file). Run it on
each kind of CPU; `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2` makes torch, oneDNN
and MKL behave as on an AVX2-only CPU (benchmarks/results/wta_paths_avx2.json).
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch

from benchmarks.lib.settings import RESULTS, parse_args, record
from benchmarks.lib.timer import median_seconds
from uhdsearch.encoder import precision
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.precision import product_dtype
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.search.searcher import Searcher
from uhdsearch.training.dev_checks import DevCheck
from uhdsearch.recipes.presets import PRESETS

RESULT_JSON = RESULTS / "wta_paths.json"


def use_path(name: str) -> None:
    import os

    os.environ[precision.PATH_VARIABLE] = name
    precision.reset_wta_path()


def encoding_rows(model32: UHDEncoder, model16: UHDEncoder, states, args) -> list[dict]:
    rows = []
    n_native = args.n_docs if precision.native_bfloat16() else args.native_docs_without_hardware
    for name, model, path, n in (("float32 (ceiling)", model32, "emulated", args.n_docs),
                                 ("bfloat16 emulated", model16, "emulated", args.n_docs),
                                 ("bfloat16 native", model16, "native", n_native)):
        use_path(path)
        seconds = median_seconds(lambda: model.encode_states(states, show_progress=False, rows=range(n)), args.repeats)
        rows.append({"computation": name, "documents": n, "ms_per_document": round(1000 * seconds / n, 2)})
        print(json.dumps(rows[-1]), flush=True)
    ceiling = rows[0]["ms_per_document"]
    for row in rows:
        row["x_float32"] = round(row["ms_per_document"] / ceiling, 2)
    return rows


def training_rows(model32: UHDEncoder, model16: UHDEncoder, states, args) -> list[dict]:
    """One training step's WTA work: forward and the sparse backward over a batch of 32 documents' tokens."""
    tokens = states.gather(range(min(32, states.n)), model16.layers)[0][0]
    rows = []
    for name, model, path in (("float32 (ceiling)", model32, "emulated"), ("bfloat16 emulated", model16, "emulated"),
                              ("bfloat16 native", model16, "native")):
        if path == "native" and not precision.native_bfloat16():
            continue  # minutes per step without bfloat16 hardware; encoding_rows gives the ratio
        use_path(path)
        layer = next(iter(model.buckets.wta.values()))

        def step() -> None:
            values, _ = layer(tokens, model.config.wta_k, product_dtype(model.config.wta_dtype))
            values.sum().backward()
            layer.zero_grad(set_to_none=True)

        seconds = median_seconds(step, args.repeats)
        rows.append({"computation": name, "tokens": int(tokens.shape[0]), "seconds_per_step": round(seconds, 3)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def dev_check_rows(model: UHDEncoder, data, args) -> list[dict]:
    """One quickstart-sized dev check: before (everything encoded again), on a new head, on a seen head."""
    queries = random.Random(0).sample(data.queries, min(args.dev_queries, len(data.queries)))
    dev = (queries, {q.query_id: data.qrels[q.query_id] for q in queries})
    sample = DevCheck(None, list(data.corpus.values()), dev, args.dev_documents)  # the recipe's document sample
    documents = [data.corpus[d] for d in sample.doc_ids]  # only they need backbone states
    states = model.token_states([d.full_text for d in documents], show_progress=False)
    check = DevCheck(states, documents, dev, len(documents), frozen_backbone=True)

    def before() -> float:  # the check as it was: documents from states, queries from text, every time
        encoded = model.encode_states(states, show_progress=False, rows=check.rows)
        index = BinaryIndex.from_encoding(encoded, check.doc_ids, None)
        return evaluate(Searcher(model, index, "binary", max_df=None).search(queries, k=100), dev[1],
                        ["nDCG@10"])["nDCG@10"]

    def new_head() -> float:
        with torch.no_grad():  # a training step changes the head: nothing of its documents is known
            next(iter(model.buckets.wta.values())).bias.add_(1e-3)
        return check(model)

    lengths = iter(range(16, 10_000))

    def seen_head() -> float:
        model.config = model.config.replace(query_max_length=next(lengths))
        return check(model)

    rows = []
    for name, fn in (("before: everything encoded again", before), ("a new head", new_head),
                     ("a seen head, another query limit", seen_head)):
        seconds = median_seconds(fn, args.repeats)
        rows.append({"dev_check": name, "seconds": round(seconds, 2)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-docs", type=int, help="documents encoded per timing")
    parser.add_argument("--native-docs-without-hardware", type=int, help="native timed on this many without "
                        "bfloat16 hardware")
    parser.add_argument("--repeats", type=int, help="timings per setting; the median counts")
    parser.add_argument("--dev-documents", type=int, help="a dev check's documents")
    parser.add_argument("--dev-queries", type=int, help="a dev check's queries")
    parser.add_argument("--out", type=Path, default=RESULT_JSON, help="result JSON (one per kind of CPU)")
    args, config, settings = parse_args(parser, "wta_paths")
    torch.manual_seed(0)
    data = load_beir(bundled_dataset_dir("scifact"), split="train")
    encoder = PRESETS["quickstart"].encoder
    model16 = UHDEncoder.new(None, encoder).eval()
    model32 = UHDEncoder.new(None, encoder.replace(wta_dtype="float32")).eval()
    model32.load_state_dict(model16.state_dict())
    texts = [d.full_text for d in list(data.corpus.values())[: args.n_docs]]
    states = model16.token_states(texts, show_progress=False)
    forced = precision.wta_path()
    encoding = encoding_rows(model32, model16, states, args)
    training = training_rows(model32, model16, states, args)
    use_path(forced)
    dev = dev_check_rows(model16, data, args)
    out = {"script": "benchmarks/speed/wta_paths.py", **record(config, settings), "encoding": encoding, "training_step": training,
           "dev_check": dev}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for row in encoding:
        print(f"{row['computation']:<20} {row['ms_per_document']:>8.2f} ms/doc  {row['x_float32']:.2f}x float32")
    for row in training:
        print(f"{row['computation']:<20} {row['seconds_per_step']:>8.3f} s per training step ({row['tokens']} tokens)")
    for row in dev:
        print(f"{row['dev_check']:<36} {row['seconds']:>7.2f} s")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
