"""End-to-end latency (query encoding + search, as the paper's Table 3 counts it): full encoder and inference-free.

Real SciFact test queries, one at a time: encode (the full encoder with the ONNX Runtime backbone, the
inference-free lookup table, the context vote, or the distilled query student), then exact binary top-10. bm25s over real dictionary text of the same size, with the
same queries (tokenization included), is the peer in the same run.

The index: `index = "synthetic"` (default) is the 100k-document synthetic index of benchmarks/speed/search_speed.py,
whose postings follow the density of the real quickstart model on SciFact (benchmarks/results/uhd_density_scifact.*,
3,783 active dims per document; documents are *not* encoded here, which at ~15-54 documents/s on 2 cores would take
0.5-2 h). `index = "real"` encodes N dictionary definitions with the model instead (cached under --work-dir).
The lookup table: the variant benchmarks/experiments/lookup_queries.py chose (in the config), learned from a sample of SciFact
documents. Set-up once: `bash benchmarks/speed/setup_search_speed.sh` (the dictionaries).

    .venv/bin/python -m benchmarks.speed.end_to_end [--n-docs 100000] [--model ../main/out/quickstart/model]

Prints a table and writes benchmarks/results/end_to_end.json. Settings: benchmarks/configs/end_to_end.toml.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.lib.encoded_cache import load_model
from benchmarks.lib.peers import dictionary_texts
from benchmarks.lib.settings import RESULTS, ROOT, parse_args, record
from benchmarks.lib.timer import percentiles, time_calls
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.precision import product_dtype, wta_product
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex

RESULT_JSON = RESULTS / "end_to_end.json"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def synthetic_index(n_docs: int, seed: int, work_dir: Path) -> tuple[InvertedIndex, str]:
    """A binary index of synthetic postings at the real model's density (search_speed.py's generator), cached."""
    from benchmarks.lib.density import load_stats
    from benchmarks.lib.synthetic import SyntheticPostings
    from uhdsearch.index.writer import IndexWriter

    profile, _, digest = load_stats()
    path = work_dir / f"synthetic-n{n_docs}-seed{seed}-{digest}"
    if not (path / "index_meta.json").is_file():
        t0 = time.perf_counter()
        synth = SyntheticPostings(profile, n_docs, seed=seed)
        with IndexWriter(path, "binary", dim=synth.dim, n_buckets=1, n_documents=n_docs, overwrite=True) as writer:
            for block in synth.blocks(max_postings=1 << 25):
                writer.add_postings(0, block.first_dim, block.indptr, block.docs)
        log(f"generated {n_docs:,} synthetic documents in {time.perf_counter() - t0:.0f} s -> {path}")
    return BinaryIndex.load(path), f"synthetic postings at the density of {profile.doc_lengths.mean():.0f} " \
                                   f"active dims per document (uhd_density_scifact)"


def real_index(model: UHDEncoder, n_docs: int, work_dir: Path, batch_size: int) -> tuple[InvertedIndex, str]:
    texts, how = dictionary_texts(n_docs, seed=0)
    path = work_dir / f"index-{model.digest()}-{n_docs}"
    if not path.exists():
        encoding = model.encode_document(texts, batch_size=batch_size, show_progress=True)
        BinaryIndex.from_encoding(encoding, [f"d{i}" for i in range(n_docs)], path, model.digest())
    return BinaryIndex.load(path), f"real text encoded by the model: {how}"


def lookup_encoder(model: UHDEncoder, args, queries: list[str]):
    """The inference-free table of the config's variant (the one benchmarks/experiments/lookup_queries.py chose), learned from
    `table_docs` sampled SciFact documents; context-free rows for the timed queries' tokens the sample lacks."""
    from benchmarks.lib.encoded_cache import token_states
    from uhdsearch.encoder.query.table import LookupEncoder, build_table
    from uhdsearch.encoder.query.corpus_table import CorpusTable
    from uhdsearch.evaluation.datasets import load_corpus

    data_dir = ROOT / args.data_root / "scifact"
    n_docs = len(load_corpus(data_dir / "corpus.jsonl"))
    rows = np.sort(np.random.default_rng(args.seed).permutation(n_docs)[:args.table_docs])
    if args.lookup_contexts == "sentences":
        corpus = load_corpus(data_dir / "corpus.jsonl")
        texts = [corpus[d].full_text for d in np.array(list(corpus))[rows]]
        table = CorpusTable.from_sentences(model, texts, show_progress=False, neighbours=args.lookup_neighbours)
    elif args.lookup_neighbours:
        raise SystemExit("lookup_neighbours = true needs lookup_contexts = \"sentences\"")
    else:
        states, token_ids, _ = token_states(model, data_dir, "document", rows)
        table = CorpusTable.from_states(model, states, token_ids)
    words = model.backbone.tokenizer(queries, add_special_tokens=False)["input_ids"]
    alone = build_table(model, token_ids=np.unique(np.concatenate([np.asarray(w, np.int64) for w in words])))
    tables = table.tables(args.lookup_summary, args.lookup_keep, fallback=alone)
    pairs = table.neighbours.rows(args.lookup_keep) if table.neighbours is not None else None
    lookup = LookupEncoder(tables, model.backbone.tokenizer, model.config, model.digest(), args.lookup_specials,
                           neighbours=pairs, keep=args.lookup_keep if pairs else None)
    voted = None
    if args.vote_winners and pairs is not None:  # the context vote (benchmarks/experiments/lookup_vote.py's choice)
        voted = LookupEncoder(table.tables(args.lookup_summary, args.vote_keep, fallback=alone),
                              model.backbone.tokenizer, model.config, model.digest(),
                              neighbours=table.neighbours.rows(args.vote_keep), keep=args.vote_keep, vote=args.vote,
                              winners=args.vote_winners)
    return lookup, voted, f"{args.lookup_summary}, keep {args.lookup_keep}, [CLS]/[SEP] rows {args.lookup_specials}, " \
                   f"from {len(rows)} SciFact documents' {args.lookup_contexts}" + \
                   (", neighbour pairs" if pairs else "")


def time_queries(encoders: dict, index: InvertedIndex, queries: list[str], threads: int) -> dict:
    """Each query through every encoder in turn (so load drift hits them alike), then searched; p50/p95 each."""
    ms = {name: {"encode": [], "search": [], "total": [], "dims": []} for name in encoders}
    for text in queries[:10] + queries:  # the first ten warm up
        for name, encode in encoders.items():
            t0 = time.perf_counter()
            encoded = encode(text)
            t1 = time.perf_counter()
            index.search_encoded(encoded, 10, [1.0] * index.n_buckets, "binary", n_threads=threads)
            t2 = time.perf_counter()
            for key, value in (("encode", t1 - t0), ("search", t2 - t1), ("total", t2 - t0)):
                ms[name][key].append(1e3 * value)
            ms[name]["dims"].append(int(sum(b.nnz for b in encoded.buckets)))
    return {name: {"encode": percentiles(m["encode"][10:]), "search": percentiles(m["search"][10:]),
                   "total": percentiles(m["total"][10:]), "query_active_dims_p50": float(np.median(m["dims"][10:]))}
            for name, m in ms.items()}


def legacy_encode(model: UHDEncoder, text: str):
    """The full encoder's query path as it was before issue 21 (tokenizer.pad, boolean-mask copies, torch.topk,
    a dense (1, dim) max-pool then CSR), the same weights and ONNX Runtime backbone: the before/after ratio."""
    from uhdsearch.encoder.model import rows_to_csr
    from uhdsearch.encoder.pooling import l2_normalize, max_pool_winners
    from uhdsearch.sparse import SparseEncoding

    tokenizer = model.backbone.tokenizer
    ids = tokenizer([text], truncation=True, max_length=model.config.query_max_length)["input_ids"]
    batch = tokenizer.pad({"input_ids": ids}, return_tensors="pt")
    dtype = product_dtype(model.config.wta_dtype)
    with torch.inference_mode():
        states = model.backbone_runner()(batch["input_ids"], batch["attention_mask"], model.layers)
        keep = batch["attention_mask"].bool()
        token_text = torch.nonzero(keep, as_tuple=True)[0]
        out = []
        for layer, s in zip(model.layers, states):
            wta = model.buckets.wta[str(layer)]
            weight, bias = wta.cast_weight(dtype) or (wta.weight, wta.bias)
            z = wta_product(s[keep], weight, bias, dtype)
            values, indices = torch.topk(z, model.config.wta_k, dim=1, sorted=False)
            pooled = l2_normalize(max_pool_winners(values.float(), indices, token_text, 1, wta.dim))
            out.append(rows_to_csr(pooled))
    return SparseEncoding(out)


def encoder_stages(model: UHDEncoder, queries: list[str]) -> dict:
    """p50 of each stage of the full encoder on one query (what UHDEncoder.encode runs, taken apart)."""
    from uhdsearch.encoder.model import rows_to_csr
    from uhdsearch.encoder.pooling import l2_normalize, max_pool_winners
    from uhdsearch.encoder.winners import pooled_csr, top_winners

    tokenizer, layer = model.backbone.tokenizer, model.layers[0]
    wta = model.buckets.wta[str(layer)]
    dtype = product_dtype(model.config.wta_dtype)
    names = ("tokenize", "backbone", "wta_product", "top_k", "pool_csr", "top_k_torch", "pool_csr_dense")
    stages: dict[str, list[float]] = {s: [] for s in names}
    with torch.inference_mode():
        for text in queries[:10] + queries:
            t = [time.perf_counter()]
            ids = tokenizer(text, truncation=True, max_length=model.config.query_max_length)["input_ids"]
            ids = torch.tensor([ids])
            t.append(time.perf_counter())
            states = model.backbone_runner()(ids, torch.ones_like(ids), model.layers)
            t.append(time.perf_counter())
            weight, bias = wta.cast_weight(dtype) or (wta.weight, wta.bias)
            z = wta_product(states[0][0], weight, bias, dtype)
            t.append(time.perf_counter())
            values, dims = top_winners(z, model.config.wta_k)
            t.append(time.perf_counter())
            token_text = torch.zeros(len(z), dtype=torch.long)
            pooled_csr(values, dims, token_text, 1, wta.dim)
            t.append(time.perf_counter())
            values, dims = torch.topk(z, model.config.wta_k, dim=1, sorted=False)  # the pre-issue-21 stages
            values = values.float()
            t.append(time.perf_counter())
            rows_to_csr(l2_normalize(max_pool_winners(values, dims, token_text, 1, wta.dim)))
            t.append(time.perf_counter())
            for name, a, b in zip(stages, t[:-1], t[1:]):
                stages[name].append(1e3 * (b - a))
    return {name: round(float(np.median(ms[10:])), 3) for name, ms in stages.items()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-docs", type=int, help="documents in the index")
    parser.add_argument("--index", choices=("synthetic", "real"), help="synthetic postings or encoded dictionary text")
    parser.add_argument("--model", help="the model encoding the queries")
    parser.add_argument("--threads", type=int, help="torch, ONNX Runtime and the search kernel")
    parser.add_argument("--query-k", help="an int, 'none' or 'config' (the model's own)")
    parser.add_argument("--n-queries", type=int, help="SciFact test queries timed")
    parser.add_argument("--work-dir", help="indexes are cached here")
    parser.add_argument("--runtime", choices=("torch", "onnx"),
                        help="the query-side backbone: PyTorch eager or ONNX Runtime (UHDEncoder.use_onnx_runtime)")
    return parser


def main() -> None:
    args, config, settings = parse_args(build_parser(), "end_to_end")
    start = time.time()
    torch.set_num_threads(args.threads)
    model = load_model(args.model, args.data_root, args.seed)
    query_k = {"config": None, "none": model.config.dim}.get(args.query_k.lower())
    if args.query_k.lower() not in ("config", "none"):
        query_k = int(args.query_k)
    model.eval()
    work_dir = ROOT / args.work_dir
    if args.index == "synthetic":
        index, what = synthetic_index(args.n_docs, args.seed, work_dir)
    else:
        index, what = real_index(model, args.n_docs, work_dir, args.batch_size)
    queries = [q.text for q in load_beir(bundled_dataset_dir("scifact"), split="test").queries][: args.n_queries]
    if args.runtime == "onnx":  # after any document encoding: ONNX Runtime pays off for short inputs only
        model.use_onnx_runtime(threads=args.threads)
    lookup, voted, table_source = lookup_encoder(model, args, queries)

    encoders = {"full encoder": lambda t: model.encode_query([t], query_k=query_k),
                "inference-free": lambda t: lookup.encode([t])}
    if voted is not None:
        encoders[f"inference-free, vote {args.vote:g} ({args.vote_winners} of {args.vote_keep})"] = \
            lambda t: voted.encode([t])
    if args.student:  # a distilled query student (encoder/query_student.py), in the same runtime as the backbone
        from uhdsearch.encoder.query.student import QueryStudent, StudentQueryEncoder

        loaded = QueryStudent.load(ROOT / args.student, model.backbone)
        student = StudentQueryEncoder(model, loaded, onnx=args.runtime == "onnx", threads=args.threads)
        kept = model.config.query_k if query_k is None else query_k  # what encode_query keeps for the full encoder
        encoders[f"query student, {loaded.layers} layers"] = lambda t: student.encode([t]).truncate(kept)
    if model.config.query_k is None and query_k is None:  # the legacy path keeps every active dim
        encoders["full, pre-issue-21"] = lambda t: legacy_encode(model, t)
    rows = time_queries(encoders, index, queries, args.threads)
    stages = encoder_stages(model, queries)

    import bm25s

    texts, how = dictionary_texts(args.n_docs, seed=0)
    retriever = bm25s.BM25(k1=0.9, b=0.4)
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    def tokenize_and_search(text: str) -> None:
        tokens = bm25s.tokenize([text], stopwords="en", show_progress=False)
        retriever.retrieve(tokens, k=10, show_progress=False, n_threads=1)
    bm25 = percentiles(time_calls(tokenize_and_search, queries[:10] + queries)[10:])  # the first ten warm up

    settings = {key: str(v) if isinstance(v, Path) else v for key, v in settings.items()}
    result = {"script": "benchmarks/speed/end_to_end.py", **record(config, settings), "index_kind": what,
              "postings_per_doc": index.n_postings() / index.n_documents,
              "index_bytes_per_doc": index.bytes_per_document(), "model_digest": model.digest(),
              "lookup_table": table_source, "rows": rows, "full_encoder_stages_p50_ms": stages,
              "bm25s_total": bm25, "bm25s_texts": how}
    print(f"{args.n_docs:,} documents ({what}); {result['postings_per_doc']:.0f} postings/doc; {args.threads} threads; "
          f"{len(queries)} SciFact test queries one at a time")
    print(f"{'query side':<18} {'encode p50':>10} {'search p50':>10} {'total p50':>9} {'total p95':>9} "
          f"{'dims':>5} {'/ bm25s':>7}")
    for name, r in rows.items():
        print(f"{name:<18} {r['encode']['p50_ms']:>10.2f} {r['search']['p50_ms']:>10.2f} {r['total']['p50_ms']:>9.2f} "
              f"{r['total']['p95_ms']:>9.2f} {r['query_active_dims_p50']:>5.0f} "
              f"{r['total']['p50_ms'] / bm25['p50_ms']:>7.2f}")
    print(f"{'bm25s':<18} {'':>10} {'':>10} {bm25['p50_ms']:>9.2f} {bm25['p95_ms']:>9.2f} (tokenize + search, "
          f"real dictionary text)")
    print("full encoder stages, p50 ms: " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
    result["wall_s"] = round(time.time() - start, 1)
    out = RESULT_JSON if args.runtime == "onnx" else RESULT_JSON.with_name("end_to_end_torch.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
