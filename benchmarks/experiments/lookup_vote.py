"""A context vote for inference-free queries (encoder/lookup_vote.py) against the shipped table and the full encoder.

Chose the context vote's setting: 40 winners among 640 candidate dims, vote weight 1 (end_to_end.toml's vote_*).

benchmarks/experiments/lookup_queries.py --ceiling found that what a lookup table loses is mostly the choice of each token's
winners, which the full encoder makes in the query's context. The vote makes that choice without a network: each
token's neighbour-pair row gives `keep` candidate dims, and the query's other tokens' rows vote on which `winners`
it keeps. The grid (keeps x winners x votes) is scored on SciFact train (`choose_on`), binary nDCG@10 at the
stop-dimension default (`max_df`); the best setting is then scored once on every collection's test split beside
the shipped table (`uhdsearch lookup`'s default: 20 dims, no vote) and the full query encoder, with and without
max_df. Document samples, tables and scoring as lookup_queries.py. Also: encode time one query at a time, and the
table's size (entries of the pair and unigram rows) for the shipped and the chosen `keep`.

    .venv/bin/python -m benchmarks.experiments.lookup_vote [--collections scifact]

Prints tables and writes benchmarks/results/lookup_vote.json. Settings: benchmarks/configs/lookup_vote.toml.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time

import numpy as np
import torch

from benchmarks.experiments.lookup_queries import StatesCollection, query_tokens, score_split, table
from benchmarks.experiments.query_student import encode_ms
from benchmarks.lib.encoded_cache import load_model
from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from uhdsearch.encoder.query.table import LookupEncoder, build_table  # noqa: E402
from uhdsearch.evaluation.datasets import load_beir  # noqa: E402

OUT_JSON = RESULTS / "lookup_vote.json"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def label(keep: int, winners: int | None, vote: float | None) -> str:
    return f"table, {keep} dims" if vote is None else f"vote {vote:g}, {winners} of {keep}"


class Encoders:
    """LookupEncoders over one sentence table (lookup_corpus.CorpusTable with neighbours); each keep's rows are
    summarised once. fallback: the context-free rows of tokens the sentences lack (None: empty rows)."""

    def __init__(self, model, sentence_table, fallback=None) -> None:
        self.model, self.sentence_table, self.fallback = model, sentence_table, fallback
        self._rows: dict[int, tuple] = {}

    @classmethod
    def of(cls, model, collection: StatesCollection, split: str) -> Encoders:
        """Over the collection's sentence table, with context-free rows for the split's query tokens."""
        return cls(model, collection.sentence_table, build_table(model, token_ids=query_tokens(model, collection,
                                                                                                 split)))

    def rows(self, keep: int) -> tuple:
        if keep not in self._rows:
            table = self.sentence_table
            self._rows[keep] = (table.tables("winners", keep, fallback=self.fallback), table.neighbours.rows(keep))
        return self._rows[keep]

    def encoder(self, keep: int, winners: int | None = None, vote: float | None = None) -> LookupEncoder:
        unigrams, pairs = self.rows(keep)
        model = self.model
        return LookupEncoder(unigrams, model.backbone.tokenizer, model.config, model.digest(), neighbours=pairs,
                             keep=keep, vote=vote, winners=winners)

    def entries(self, keep: int) -> int:
        unigrams, pairs = self.rows(keep)
        return int(sum(t.nnz for t in unigrams) + sum(p.left.nnz + p.right.nnz for p in pairs))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--collections", type=comma_list())
    parser.add_argument("--keeps", type=comma_list(int))
    parser.add_argument("--winners", type=comma_list(int))
    parser.add_argument("--votes", type=comma_list(float))
    args, config, settings = parse_args(parser, "lookup_vote", argv)
    start = time.time()
    torch.set_num_threads(args.threads)
    model = load_model(args.model, args.data_root, args.seed)
    choose_name, choose_split = args.choose_on.split(":")
    result = {"script": "benchmarks/experiments/lookup_vote.py", **record(config, settings), "model_digest": model.digest()}
    dev = StatesCollection(model, ROOT / args.data_root / choose_name, args.corpus_docs.get(choose_name), args.seed,
                           sentence_tables=True)
    encoders = Encoders.of(model, dev, choose_split)
    grid = {label(args.shipped_keep, None, None): encoders.encoder(args.shipped_keep)}
    for keep, winners, vote in itertools.product(args.keeps, args.winners, args.votes):
        if winners <= keep:
            grid[label(keep, winners, vote)] = encoders.encoder(keep, winners, vote)
    result["dev_rows"] = score_split(model, dev, choose_split, grid, [args.max_df])
    print(table(result["dev_rows"]))
    voted = [r for r in result["dev_rows"] if r["queries"].startswith("vote")]
    best = max(voted, key=lambda r: r["binary"])  # the first listed wins a tie
    keep, winners, vote = next((k, w, v) for k, w, v in itertools.product(args.keeps, args.winners, args.votes)
                               if label(k, w, v) == best["queries"])
    result["chosen"] = {"keep": keep, "winners": winners, "vote": vote, "label": best["queries"]}
    print(f"chosen on {args.choose_on} (binary nDCG@10 at max_df {args.max_df:g}): {best['queries']}")
    result["table_entries"] = {label(args.shipped_keep, None, None): encoders.entries(args.shipped_keep),
                               best["queries"]: encoders.entries(keep)}
    texts = {q.query_id: q.text for q in load_beir(dev.data_dir, "test").queries}
    timed = [texts[q] for q in dev.split("test")[0][:args.n_timed]]
    result["encode_p50_ms"] = {name: encode_ms(lambda t, e=grid[name]: e.encode([t]), timed)
                               for name in (label(args.shipped_keep, None, None), best["queries"])}
    result["rows"] = []
    for name in args.collections:
        collection = dev if name == choose_name else StatesCollection(
            model, ROOT / args.data_root / name, args.corpus_docs.get(name), args.seed, sentence_tables=True)
        on_test = Encoders.of(model, collection, "test")
        result["rows"] += score_split(model, collection, "test", {
            label(args.shipped_keep, None, None): on_test.encoder(args.shipped_keep),
            best["queries"]: on_test.encoder(keep, winners, vote)}, [1.0, args.max_df])
    print(table(result["rows"]))
    for name, ms in result["encode_p50_ms"].items():
        print(f"encode p50, one query at a time: {name} {ms:.3f} ms ({result['table_entries'][name]:,} entries)")
    result["wall_s"] = round(time.time() - start, 1)
    OUT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {OUT_JSON} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
