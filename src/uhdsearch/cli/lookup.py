"""`uhdsearch lookup`: build the inference-free query table of a model from a corpus (encoder/lookup_corpus.py) and
save it beside the model, so `uhdsearch search --lookup` encodes queries by a tokenizer call and a table gather."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from uhdsearch.errors import UsageError


def lookup(
    model: Path = typer.Option(..., "--model", help="The UHD model directory; the table is saved into it."),
    data: Path = typer.Option(..., "--data", help="BEIR-layout directory whose corpus.jsonl teaches the rows."),
    summary: str = typer.Option("winners", "--summary", help="winners (a token's mean WTA output over its "
                                "occurrences) or mean-state (the winners of its mean state)."),
    keep: int = typer.Option(20, "--keep", help="Dims kept per token row (chosen on SciFact train: 20)."),
    contexts: str = typer.Option("sentences", "--contexts", help="sentences (the corpus split into sentences, "
                                 "each encoded as a query; chosen on SciFact train) or documents (whole "
                                 "documents, as indexed)."),
    neighbours: Optional[bool] = typer.Option(None, "--neighbours/--no-neighbours", help="Also rows of (token, "
                                              "left / right neighbour) pairs, so a query token's row depends on its "
                                              "neighbours (default: with sentences; chosen on SciFact train). "
                                              "Memory grows with the corpus: 4.7 GB for SciFact's 5,183 "
                                              "abstracts; --documents bounds it."),
    vote: Optional[float] = typer.Option(None, "--vote", help="With --neighbours: a token's --keep dims become "
                                         "candidates, scored by its row plus VOTE x the query's other tokens' "
                                         "rows; it keeps the --winners best (a context choice, no network)."),
    winners: Optional[int] = typer.Option(None, "--winners", help="Dims each query token keeps with --vote."),
    documents: int = typer.Option(0, "--documents", help="Learn from the first N documents only (0: all)."),
    context_free: bool = typer.Option(False, "--context-free", help="Give tokens the corpus lacks their "
                                      "context-free row ([CLS] token [SEP]; a pass over the vocabulary, minutes)."),
) -> None:
    """Build MODEL/query_lookup.npz: an inference-free query encoder learned from the corpus's token contexts."""
    from uhdsearch.encoder.query.table import LookupEncoder, build_table
    from uhdsearch.encoder.query.corpus_table import SUMMARIES, CorpusTable
    from uhdsearch.encoder.query.vote import check_vote
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import load_corpus

    if summary not in SUMMARIES:
        raise UsageError(f"--summary {summary!r}; choose one of {', '.join(SUMMARIES)}")
    if contexts not in ("sentences", "documents"):
        raise UsageError(f"--contexts {contexts!r}; choose sentences or documents")
    if neighbours is None:
        neighbours = contexts == "sentences"
    if neighbours and contexts != "sentences":
        raise UsageError("--neighbours learns from sentences: give --contexts sentences, or --no-neighbours")
    if (vote is None) != (winners is None) or (vote is not None and not neighbours):
        raise UsageError("--vote and --winners come together, and with --neighbours")
    if keep < 1 or documents < 0:
        raise UsageError(f"--keep {keep} must be >= 1 and --documents {documents} >= 0")
    check_vote(vote, winners, keep)  # before the corpus pass, not after it
    encoder = UHDEncoder.from_pretrained(model)
    corpus = list(load_corpus(data / "corpus.jsonl").values())
    texts = [d.full_text for d in (corpus[:documents] if documents else corpus)]
    table = CorpusTable.from_sentences(encoder, texts, neighbours=neighbours) if contexts == "sentences" else \
        CorpusTable.from_texts(encoder, texts)
    fallback = build_table(encoder) if context_free else None
    lookup_encoder = LookupEncoder(table.tables(summary, keep, fallback=fallback), encoder.backbone.tokenizer,
                                   encoder.config, encoder.digest(),
                                   neighbours=table.neighbours.rows(keep) if neighbours else None,
                                   keep=keep if neighbours else None, vote=vote, winners=winners)
    path = lookup_encoder.save(model)
    seen = int((table.occurrences > 0).sum())
    pairs = sum(r.left_keys.shape[0] + r.right_keys.shape[0] for r in lookup_encoder.neighbours or [])
    typer.echo(f"wrote {path}: {seen:,} tokens" + (f" and {pairs:,} neighbour pairs (winners)" if neighbours else "")
               + f" learned from {len(texts):,} documents' {contexts} ({summary}, {keep} dims a row"
               + (f"; each query token keeps {winners}, voted with weight {vote:g})" if vote is not None else ")"))
