"""Shared records: queries, documents, qrels and runs. No torch, no I/O beyond TREC text."""
from __future__ import annotations

import logging

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Document:
    doc_id: str
    text: str
    title: str = ""

    @property
    def full_text(self) -> str:
        """Title and text joined the way BEIR systems index them."""
        return f"{self.title} {self.text}".strip() if self.title else self.text


@dataclass(frozen=True)
class Query:
    query_id: str
    text: str


@dataclass(frozen=True)
class ScoredDoc:
    doc_id: str
    score: float


Qrels = dict[str, dict[str, int]]  # query_id -> doc_id -> relevance


@dataclass
class Run:
    """Ranked results: query_id -> list of ScoredDoc, best first."""

    results: dict[str, list[ScoredDoc]] = field(default_factory=dict)
    name: str = "uhdsearch"

    def __len__(self) -> int:
        return len(self.results)

    def __iter__(self) -> Iterator[str]:
        return iter(self.results)

    def __getitem__(self, query_id: str) -> list[ScoredDoc]:
        return self.results[query_id]

    def doc_ids(self, query_id: str) -> list[str]:
        return [hit.doc_id for hit in self.results.get(query_id, [])]

    def as_dict(self) -> dict[str, dict[str, float]]:
        """query_id -> doc_id -> score, the shape ir_measures and ranx take."""
        return {q: {h.doc_id: h.score for h in hits} for q, hits in self.results.items()}

    def save(self, path: str) -> None:
        """Write a TREC run file (see uhdsearch.evaluation.runs)."""
        from uhdsearch.evaluation.runs import save_run

        save_run(self, path)

    @classmethod
    def load(cls, path: str) -> Run:
        from uhdsearch.evaluation.runs import load_run

        return load_run(path)


def as_queries(queries: Mapping[str, str] | Sequence[Query] | Iterable[Query]) -> list[Query]:
    """Accept {query_id: text} or Query records; return a list of Query."""
    if isinstance(queries, Mapping):
        return [Query(str(k), v) for k, v in queries.items()]
    out = list(queries)
    for q in out:
        if not isinstance(q, Query):
            raise TypeError(f"expected Query records or a {{query_id: text}} mapping, got {type(q).__name__}")
    return out


def start_run(queries: Mapping[str, str] | Sequence[Query], k: int, name: str) -> tuple[Run, list[Query]]:
    """The common start of every `search(queries, k)`: check k, give every query an (empty) result list.

    Returns the Run and the queries with text to search; empty or whitespace-only queries keep empty results.
    """
    if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise ValueError(f"k={k!r} must be a positive integer")
    queries = as_queries(queries)
    run = Run(name=name)
    for q in queries:
        run.results[q.query_id] = []
    live = [q for q in queries if q.text.strip()]
    if len(live) < len(queries):
        logging.getLogger("uhdsearch").warning("%d empty or whitespace-only queries get empty results",
                                               len(queries) - len(live))
    return run, live
