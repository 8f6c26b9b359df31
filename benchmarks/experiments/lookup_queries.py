"""Inference-free queries (encoder/lookup.py, lookup_corpus.py) against the full query encoder: nDCG@10, encode time.

Chose the lookup table's summary, each token's WTA winners ("winners"); with --sentence-tables, sentence
contexts with neighbour pairs, 20 dims a row (what `uhdsearch lookup` builds).

Per collection, the backbone states of the corpus and of every query are computed once and cached
(encoded_cache.token_states: a frozen backbone's states do not depend on the head). One pass of the WTA head over
the corpus states gives both the documents' vectors and the corpus tables, as an index build would. `corpus_docs`
caps a collection at a seeded sample of its documents (encoding is slow on 2 shared cores); its queries are then
those with a judged relevant document in the sample, judged against the sample only, for both query sides.
Table variants are compared on SciFact *train* queries (`choose_on`); the best by binary nDCG@10 is scored once on
every collection's test queries beside the full query encoder.

`--sentence-tables` adds tables learned in query-like contexts: the indexed documents split into sentences (of at
least 4 words), each encoded as a query, the "winners" summary over those occurrences ("sentences-winners-K"), and
rows of (token, left / right neighbour) pairs over the same sentences ("sentences-neighbours-K",
encoder/lookup_neighbours.py).

`--ceiling` (with --sentence-tables) asks what the tables' rows lose against a choice made in context: the full
encoder's own contextual WTA scores (its dtype and tie rule), each token choosing its winners only among its row's
`C` largest dims (the pair sums, the unigram row where no pair was seen, the context-free row for a token the
sentences lack; `ceiling_keeps`), [CLS] and [SEP] left out as the lookup leaves them out, and the same without the
restriction ("full, no [CLS]/[SEP]", the reference for the restricted rows). A table fixes one row per token (or
pair) for every context; this keeps the rows' dims and lets the context choose among them: one chooser, the
encoder's own, not a bound on every choice. The shipped table is scored beside it on the choice split with and
without max_df. Scored on the choice split and, as a diagnostic that chooses nothing, on every collection's test
split.

    .venv/bin/python -m benchmarks.experiments.lookup_queries [--sentence-tables [--ceiling]]

Prints tables and writes benchmarks/results/lookup_queries.json (lookup_queries_sentences.json with
--sentence-tables, lookup_queries_ceiling.json with --ceiling). Settings: benchmarks/configs/lookup_queries.toml.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from benchmarks.experiments.stop_dims import Collection
from benchmarks.lib.encoded_cache import load_model, token_states
from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from benchmarks.lib.timer import median_ms, time_calls
from uhdsearch.encoder.precision import product_dtype, wta_product
from uhdsearch.encoder.query.corpus_table import CorpusTable
from uhdsearch.encoder.query.table import LookupEncoder, build_table
from uhdsearch.encoder.winners import pooled_csr, top_winners
from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.sparse import SparseEncoding

OUT_JSON = RESULTS / "lookup_queries.json"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def documents_and_table(model, states, token_ids, table_rows, batch_size: int = 64):
    """The documents' vectors (as model.encode_states gives them) and a CorpusTable of `table_rows`, one pass."""
    dtype = product_dtype(model.config.wta_dtype)
    table, sampled = CorpusTable(model), np.zeros(states.n, bool)
    sampled[table_rows] = True
    parts = [[] for _ in model.layers]
    with torch.inference_mode():
        for start in range(0, states.n, batch_size):
            rows = list(range(start, min(states.n, start + batch_size)))
            tokens, token_text = states.gather(rows, model.layers)
            winners = []
            for b, (layer, t) in enumerate(zip(model.layers, tokens)):
                wta = model.buckets.wta[str(layer)]
                values, dims = wta(t, model.config.wta_k, dtype)
                winners.append((values, dims))
                parts[b].append(pooled_csr(values, dims, token_text, len(rows), wta.dim))
            keep = sampled[np.asarray(rows)][token_text.numpy()]
            if keep.any():
                ids = np.concatenate([token_ids[states.offsets[r]:states.offsets[r + 1]] for r in rows])
                mask = torch.from_numpy(keep)
                table.add(ids[keep], [t[mask] for t in tokens], [(v[mask], d[mask]) for v, d in winners])
    return SparseEncoding([sp.vstack(p, format="csr") for p in parts]), table


class StatesCollection(Collection):
    """stop_dims.Collection over documents and queries encoded from cached backbone states; `n_docs`: a seeded
    sample of the corpus (None: all of it), which the qrels and queries are then restricted to."""

    def __init__(self, model, data_dir: Path, n_docs: int | None, seed: int, sentence_tables: bool = False):
        from uhdsearch.evaluation.datasets import load_corpus
        from uhdsearch.index.inverted import WeightedIndex

        self.data_dir = data_dir
        total = len(load_corpus(data_dir / "corpus.jsonl"))
        rows = None if n_docs is None or n_docs >= total else \
            np.sort(np.random.default_rng(seed).permutation(total)[:n_docs])
        t0 = time.perf_counter()
        query_states, _, query_ids = token_states(model, data_dir, "query")
        doc_states, doc_tokens, self.doc_ids = token_states(model, data_dir, "document", rows)
        docs, self.table = documents_and_table(model, doc_states, doc_tokens, np.arange(doc_states.n))
        log(f"{data_dir.name}: {doc_states.n} documents and their table in {time.perf_counter() - t0:.0f} s")
        self.index = WeightedIndex.from_encoding(docs, self.doc_ids, None)
        self.ones = WeightedIndex.from_encoding(docs.binarize(), self.doc_ids, None)
        self.queries = model.encode_states(query_states, "query", show_progress=False)
        self.row_of = {q: i for i, q in enumerate(query_ids)}
        self.n_docs = doc_states.n
        self.sentence_table = self._sentence_table(model, data_dir) if sentence_tables else None

    def _sentence_table(self, model, data_dir: Path) -> CorpusTable:
        from uhdsearch.evaluation.datasets import load_corpus

        corpus = load_corpus(data_dir / "corpus.jsonl")
        t0 = time.perf_counter()
        table = CorpusTable.from_sentences(model, [corpus[d].full_text for d in self.doc_ids], show_progress=False,
                                           neighbours=True)
        log(f"{data_dir.name}: sentences and their table in {time.perf_counter() - t0:.0f} s")
        return table

    def split(self, split: str):
        """Queries with a judged relevant document among the indexed ones; qrels of those documents only."""
        data = load_beir(self.data_dir, split)
        indexed = set(self.doc_ids)
        qrels = {q: {d: r for d, r in judged.items() if d in indexed and r > 0} for q, judged in data.qrels.items()}
        qrels = {q: judged for q, judged in qrels.items() if judged}
        ids = [q.query_id for q in data.queries if q.query_id in qrels]
        return ids, self.queries[np.array([self.row_of[q] for q in ids])], qrels


def variants(model, collection: StatesCollection, keeps: list[int], query_tokens: np.ndarray,
             only: str | None = None) -> dict:
    """name -> LookupEncoder (`only`: just that one). Every corpus table falls back to the context-free row of a
    token the corpus lacks. Context-free rows are built for the scored queries' tokens only (a row no scored query
    uses cannot change a score), so they cost seconds here, not a vocabulary pass (~10 min on 2 busy cores)."""
    alone = build_table(model, token_ids=query_tokens)
    tokenizer, digest = model.backbone.tokenizer, model.digest()
    out = {"alone": LookupEncoder(alone, tokenizer, model.config, digest)}
    for summary in ("mean-state", "winners"):
        for keep in keeps:
            for specials in (False, True):
                name = f"{summary}-{keep}{'+cls-sep' if specials else ''}"
                if only in (None, name):
                    out[name] = LookupEncoder(collection.table.tables(summary, keep, fallback=alone), tokenizer,
                                              model.config, digest, specials=specials)
    for keep in keeps if collection.sentence_table is not None else []:
        unigrams = collection.sentence_table.tables("winners", keep, fallback=alone)
        if only in (None, f"sentences-winners-{keep}"):
            out[f"sentences-winners-{keep}"] = LookupEncoder(unigrams, tokenizer, model.config, digest)
        if only in (None, f"sentences-neighbours-{keep}"):
            out[f"sentences-neighbours-{keep}"] = LookupEncoder(
                unigrams, tokenizer, model.config, digest, neighbours=collection.sentence_table.neighbours.rows(keep),
                keep=keep)
    return out if only is None else {only: out[only]}


def score_split(model, collection: StatesCollection, split: str, encoders: dict, max_dfs: list[float]) -> list[dict]:
    """Rows of the full encoder and of each named query encoder on the split's queries."""
    ids, full, _ = collection.split(split)
    texts = {q.query_id: q.text for q in load_beir(collection.data_dir, split).queries}
    encodings = {"full encoder": full, **{name: encoder.encode([texts[q] for q in ids])
                                          for name, encoder in encoders.items()}}
    return score_encodings(collection, split, encodings, max_dfs)


def score_encodings(collection: StatesCollection, split: str, encodings: dict, max_dfs: list[float]) -> list[dict]:
    """One row per (named encoding of the split's queries, max_df): binary and 4-bit IDF nDCG@10."""
    ids, _, qrels = collection.split(split)
    rows = []
    for side, queries in encodings.items():
        for max_df in max_dfs:
            row = collection.score(ids, queries, qrels, max_df, 100)
            rows.append({"collection": collection.data_dir.name, "split": split, "queries": side,
                         "query_dims": row["query_dims"], "max_df": max_df, "binary": row["binary"],
                         "binary-idf4": row["binary-idf4"]})
            log(json.dumps(rows[-1]))
    return rows


def query_tokens(model, collection: StatesCollection, split: str) -> np.ndarray:
    ids, _, _ = collection.split(split)
    texts = {q.query_id: q.text for q in load_beir(collection.data_dir, split).queries}
    encoded = model.backbone.tokenizer([texts[q] for q in ids], add_special_tokens=False)["input_ids"]
    return np.unique(np.concatenate([np.asarray(x, np.int64) for x in encoded]))


def choose_among(z: torch.Tensor, candidates: sp.csr_matrix, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's k largest scores of z among that row's candidate dims (candidates' nonzero columns), by the WTA
    head's own top-k (encoder/winners.py: ties to the lower dim); where a row has fewer than k candidates the rest of
    its winners score -inf, which pooling drops (it keeps values > 0).

    Example:
        >>> z = torch.tensor([[5.0, 1.0, 3.0, 4.0]])
        >>> values, dims = choose_among(z, sp.csr_matrix(np.array([[0, 1, 1, 0]])), 3)
        >>> dims[0, :2].tolist(), values[0].tolist()
        ([2, 1], [3.0, 1.0, -inf])
    """
    allowed = torch.zeros(z.shape, dtype=torch.bool)
    owner = np.repeat(np.arange(candidates.shape[0]), np.diff(candidates.indptr))
    allowed[torch.from_numpy(owner), torch.from_numpy(candidates.indices.astype(np.int64))] = True
    return top_winners(z.masked_fill(~allowed, -np.inf).contiguous(), k)


def ceiling_batch(model, tokens: torch.Tensor, token_ids: np.ndarray, token_text: torch.Tensor, n_texts: int,
                  candidates=None) -> sp.csr_matrix:
    """Pooled query vectors of `n_texts` texts from their packed last-layer `tokens` (token_ids: each text's ids,
    [CLS] ... [SEP] included, in the same order), [CLS] and [SEP] left out; the WTA scores as the encoder computes
    them (its dtype); each token's winners among candidates(token_ids, positions)'s row (None: among all dims)."""
    wta = model.buckets.wta[str(model.layers[0])]
    dtype = product_dtype(model.config.wta_dtype)
    special = np.array(sorted(model.backbone.tokenizer.all_special_ids))
    positions = np.flatnonzero(~np.isin(token_ids, special))
    with torch.inference_mode():
        weight, bias = wta.cast_weight(dtype) or (wta.weight, wta.bias)
        z = wta_product(tokens[positions], weight, bias, dtype)  # the encoder's product on this CPU's path
        if candidates is None:
            values, dims = top_winners(z.contiguous(), model.config.wta_k)
        else:
            values, dims = choose_among(z, candidates(token_ids, positions), model.config.wta_k)
    return pooled_csr(values, dims, token_text[positions], n_texts, wta.dim)


def ceiling_encoding(model, collection: StatesCollection, split: str, keep: int | None, fallback: sp.csr_matrix,
                     batch: int = 64) -> SparseEncoding:
    """The split's queries by the full encoder's token states, [CLS] and [SEP] left out, each token's winners chosen
    among its table row's `keep` largest dims (None: among all dims, the full encoder without [CLS] and [SEP]);
    fallback: the context-free rows (build_table) of tokens the sentences lack."""
    ids, _, _ = collection.split(split)
    states, token_ids, _ = token_states(model, collection.data_dir, "query")
    rows = np.array([collection.row_of[q] for q in ids])
    candidates = None
    if keep is not None:
        unigrams = collection.sentence_table.tables("winners", keep, fallback=[fallback])[0]
        pairs = collection.sentence_table.neighbours.rows(keep)[0]
        candidates = lambda ids, positions: pairs.token_rows(ids, positions, unigrams, keep)  # noqa: E731
    parts = []
    for start in range(0, rows.shape[0], batch):
        chunk = rows[start:start + batch]
        (tokens,), token_text = states.gather(chunk, model.layers)
        ids_chunk = np.concatenate([token_ids[states.offsets[r]:states.offsets[r + 1]] for r in chunk])
        parts.append(ceiling_batch(model, tokens, ids_chunk, token_text, len(chunk), candidates))
    return SparseEncoding([sp.vstack(parts, format="csr")])


def ceiling_rows(model, collection: StatesCollection, split: str, keeps: list[int], max_dfs: list[float]) -> list[dict]:
    (fallback,) = build_table(model, token_ids=query_tokens(model, collection, split))
    encodings = {"full, no [CLS]/[SEP]" if keep is None else f"ceiling, row's top {keep}":
                 ceiling_encoding(model, collection, split, keep, fallback) for keep in [None, *keeps]}
    return score_encodings(collection, split, encodings, max_dfs)


def table(rows: list[dict]) -> str:
    lines = [f"{'collection':<9} {'split':<5} {'queries':<26} {'dims':>5} {'max_df':>6} {'binary':>7} {'idf4':>7}"]
    for r in rows:
        lines.append(f"{r['collection']:<9} {r['split']:<5} {r['queries']:<26} {r['query_dims']:>5.0f} "
                     f"{r['max_df']:>6g} {r['binary']:>7.4f} {r['binary-idf4']:>7.4f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--collections", type=comma_list())
    parser.add_argument("--n-timed", type=int)
    parser.add_argument("--test-once", action=argparse.BooleanOptionalAction)
    parser.add_argument("--sentence-tables", action=argparse.BooleanOptionalAction)
    parser.add_argument("--ceiling", action=argparse.BooleanOptionalAction)
    args, config, settings = parse_args(parser, "lookup_queries", argv)
    if args.ceiling and not args.sentence_tables:
        parser.error("--ceiling needs --sentence-tables (it bounds the sentence tables' rows)")
    start = time.time()
    torch.set_num_threads(args.threads)
    model = load_model(args.model, args.data_root, args.seed)
    choose_collection, choose_split = args.choose_on.split(":")
    collections = {name: StatesCollection(model, ROOT / args.data_root / name, args.corpus_docs.get(name), args.seed,
                                          args.sentence_tables) for name in args.collections}
    dev = collections[choose_collection]
    candidates = variants(model, dev, args.keeps, query_tokens(model, dev, choose_split))
    dev_rows = score_split(model, dev, choose_split, candidates, [1.0])
    lookup_rows = [r for r in dev_rows if r["queries"] != "full encoder"]
    chosen = max(lookup_rows, key=lambda r: r["binary"])["queries"]  # first listed wins a tie
    print(table(dev_rows))
    print(f"chosen on {choose_collection} {choose_split}: {chosen}")
    result = {"script": "benchmarks/experiments/lookup_queries.py", **record(config, settings), "model_digest": model.digest(),
              "chosen": chosen, "dev_rows": dev_rows, "indexed_docs": {n: c.n_docs for n, c in collections.items()},
              "rows": []}
    if args.test_once:
        for name, collection in collections.items():
            keep = re.search(r"-(\d+)", chosen)
            encoders = variants(model, collection, [int(keep.group(1))] if keep else [],
                                query_tokens(model, collection, "test"), only=chosen)
            result["rows"] += score_split(model, collection, "test", {chosen: encoders[chosen]},
                                          [1.0, args.max_df])
        print(table(result["rows"]))
        lookup = encoders[chosen]
        sample = [q.text for q in load_beir(collection.data_dir, "test").queries][: args.n_timed]
        times = time_calls(lambda text: lookup.encode([text]), sample * 2)  # the first pass warms caches
        result["lookup_encode_p50_ms"] = round(median_ms(times[len(sample):]), 3)
        result["table_entries"] = int(sum(t.nnz for t in lookup.tables))
        print(f"lookup encode p50: {result['lookup_encode_p50_ms']:.3f} ms per query (one at a time)")
    if args.ceiling:
        result["ceiling_rows"] = score_split(model, dev, choose_split, {chosen: candidates[chosen]},
                                             [1.0, args.max_df])
        result["ceiling_rows"] += ceiling_rows(model, dev, choose_split, args.ceiling_keeps, [1.0, args.max_df])
        for collection in collections.values():
            result["ceiling_rows"] += ceiling_rows(model, collection, "test", args.ceiling_keeps, [1.0, args.max_df])
        print(table(result["ceiling_rows"]))
    result["wall_s"] = round(time.time() - start, 1)
    out = OUT_JSON.with_name("lookup_queries_sentences.json") if args.sentence_tables else OUT_JSON
    out = out.with_name("lookup_queries_ceiling.json") if args.ceiling else out
    out.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
