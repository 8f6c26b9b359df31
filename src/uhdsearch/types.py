"""Shared records (queries, documents, qrels, runs), the TREC run format beside Run, the Retriever protocol and the
one check of a result depth `k`. No torch; imports nothing of uhdsearch but errors and io."""
from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from uhdsearch.errors import DataFormatError, UsageError
from uhdsearch.io import atomic_write_text, read_lines

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Document:
    """One document of a corpus: its external id, body text and optional title (BEIR's corpus.jsonl fields)."""

    doc_id: str
    text: str
    title: str = ""

    @property
    def full_text(self) -> str:
        """Title and text joined the way BEIR systems index them."""
        return f"{self.title} {self.text}".strip() if self.title else self.text


@dataclass(frozen=True)
class Query:
    """One query: its external id and text (BEIR's queries.jsonl `_id` and `text`)."""

    query_id: str
    text: str


@dataclass(frozen=True)
class ScoredDoc:
    """One hit of a ranked list: the document's external id and its score (higher ranks first)."""

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
        """The query's doc_ids, best first ([] for a query the run does not hold)."""
        return [hit.doc_id for hit in self.results.get(query_id, [])]

    def as_dict(self) -> dict[str, dict[str, float]]:
        """query_id -> doc_id -> score, the shape ir_measures and ranx take."""
        return {q: {h.doc_id: h.score for h in hits} for q, hits in self.results.items()}

    def save(self, path: str | os.PathLike, name: str | None = None) -> None:
        """Write a TREC run file (`save_run`)."""
        save_run(self, path, name)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Run:
        """Read a TREC run file (`load_run`)."""
        return load_run(path)


ON_DUPLICATE = ("error", "first", "last")
DUPLICATE_HINT = ("or pass on_duplicate='first' or 'last' to keep one of each "
                  "(CLI: --duplicate-queries keep-first|keep-last)")


def as_queries(queries: Mapping[str, str] | Sequence[Query] | Iterable[Query],
               on_duplicate: str = "error") -> list[Query]:
    """Accept {query_id: text} or Query records; return a list of Query.

    Args:
        on_duplicate: what a query_id given more than once does: "error" (the default: one result list would
            silently replace the other), "first" or "last" (keep that occurrence where it stands, drop the
            others, and log one warning with the count).

    Raises:
        TypeError: an item is not a Query, or a text is not a string.
        UsageError: a query_id appears twice and `on_duplicate` is "error", an unknown `on_duplicate`, or a
            text holds a lone surrogate (not valid Unicode; no tokenizer takes it).

    Examples:
        >>> as_queries([Query("q1", "a"), Query("q1", "b")])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        uhdsearch.errors.UsageError: query_id 'q1' appears twice (items 0 and 1); query ids must be unique, ...
        >>> [q.text for q in as_queries([Query("q1", "a"), Query("q2", "b"), Query("q1", "c")], on_duplicate="last")]
        ['b', 'c']
    """
    check_on_duplicate(on_duplicate)
    if isinstance(queries, Mapping):
        out = [Query(str(k), v) for k, v in queries.items()]
    else:
        out = list(queries)
    kept: dict[str, int] = {}  # query_id -> index in `out` of the occurrence kept
    for i, q in enumerate(out):
        if not isinstance(q, Query):
            raise TypeError(f"expected Query records or a {{query_id: text}} mapping, got {type(q).__name__}")
        if not isinstance(q.text, str):
            raise TypeError(f"query {q.query_id!r}: text must be a string, got {type(q.text).__name__}")
        try:
            q.text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UsageError(f"query {q.query_id!r}: text holds a lone surrogate {q.text[exc.start]!r} at "
                             f"character {exc.start + 1}: not valid Unicode text") from None
        if q.query_id in kept and on_duplicate == "error":
            raise UsageError(f"query_id {q.query_id!r} appears twice (items {kept[q.query_id]} and {i}); "
                             f"query ids must be unique, {DUPLICATE_HINT}")
        if q.query_id not in kept or on_duplicate == "last":
            kept[q.query_id] = i
    if len(kept) == len(out):
        return out
    keep = set(kept.values())
    report_duplicates(len(out) - len(keep), len({q.query_id for i, q in enumerate(out) if i not in keep}),
                      on_duplicate, "the queries given")
    return [q for i, q in enumerate(out) if i in keep]


def check_on_duplicate(on_duplicate: str) -> None:
    """Refuse an `on_duplicate` other than "error", "first" or "last"."""
    if on_duplicate not in ON_DUPLICATE:
        raise UsageError(f"on_duplicate={on_duplicate!r}; choose one of {', '.join(map(repr, ON_DUPLICATE))}")


def report_duplicates(n_dropped: int, n_ids: int, on_duplicate: str, where: str) -> None:
    """The one warning of a duplicate opt-out: how many queries were dropped, for how many ids, which was kept."""
    logger.warning("%s: dropped %d duplicate queries (ids given more than once: %d); kept the %s occurrence of "
                   "each (on_duplicate=%r)", where, n_dropped, n_ids, on_duplicate, on_duplicate)


def start_run(queries: Mapping[str, str] | Sequence[Query], k: int, name: str) -> tuple[Run, list[Query]]:
    """The common start of every `search(queries, k)`: check k, give every query an (empty) result list.

    Returns the Run and the queries with text to search; empty or whitespace-only queries keep empty results.
    """
    check_k(k)
    queries = as_queries(queries)
    run = Run(name=name)
    for q in queries:
        run.results[q.query_id] = []
    live = [q for q in queries if q.text.strip()]
    if len(live) < len(queries):
        logger.warning("%d of %d queries are empty or whitespace-only and get empty results",
                       len(queries) - len(live), len(queries))
    return run, live


def check_k(k: Any, name: str = "k") -> int:
    """The one check of a result depth: a positive integer (numpy integers accepted, bools refused).

    Returns:
        k as a Python int.

    Examples:
        >>> check_k(10)
        10
        >>> check_k(0)
        Traceback (most recent call last):
        ...
        uhdsearch.errors.UsageError: k=0 must be a positive integer
    """
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise UsageError(f"{name}={k!r} must be a positive integer")
    return int(k)


@runtime_checkable
class Retriever(Protocol):
    """The one protocol of anything that searches: ``search(queries, k) -> Run``.

    Every system in uhdsearch is a Retriever: `Searcher` (UHD over any index `open_index` opens),
    `BM25Retriever`, `DenseRetriever`, `SpladeRetriever`, `HybridRetriever`, the comparison systems' `DualEncoder`
    and `SumOfMaxReranker`, and `CachedRetriever`; so `compare`, `HybridRetriever` and the distillation teachers
    take any mix. The check is structural: a class of your own needs no base class, only the method.

    `queries` is ``{query_id: text}`` or a sequence of `Query` records. The Run has one entry per query, in the
    order given (an empty text gets an empty list), each at most `k` hits with scores descending and unique
    doc_ids; a smaller `k` gives the head of a larger one (`uhdsearch.topk`'s tie rule).

    Examples:
        >>> class Constant:
        ...     def search(self, queries, k):
        ...         return Run({q: [ScoredDoc("d1", 1.0)][:k] for q in queries})
        >>> isinstance(Constant(), Retriever)
        True
        >>> Constant().search({"q1": "any text"}, k=10)["q1"]
        [ScoredDoc(doc_id='d1', score=1.0)]
    """

    def search(self, queries: Any, k: int) -> Run:
        """Rank documents for each query; at most `k` hits per query (k >= 1)."""
        ...


# ------------------------------------------------------------------ TREC run files (qid Q0 docid rank score name)
def save_run(run: Run, path: str | os.PathLike, name: str | None = None) -> None:
    """Write a run as a TREC run file, atomically.

    Each line is ``query_id Q0 doc_id rank score name`` with rank counted from 1 in the order the run
    holds the hits, and the score written with ``repr`` so that it reads back as the same float.
    Queries with no hits write no lines.

    Args:
        run: The run to write.
        path: File to write; replaced if it exists.
        name: The run tag of the last column; defaults to ``run.name``.

    Raises:
        ValueError: the name or an id is empty or contains whitespace (the file could not be read back),
            or a score is NaN or infinite.

    Examples:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "bm25.trec"
        >>> save_run(Run({"q1": [ScoredDoc("d7", 2.5), ScoredDoc("d3", 1.0)]}), p, name="bm25")
        >>> print(p.read_text(), end="")
        q1 Q0 d7 1 2.5 bm25
        q1 Q0 d3 2 1.0 bm25
    """
    text = format_run(run, name)
    atomic_write_text(path, text)
    logger.debug("wrote %d lines for %d queries to %s", text.count("\n"), len(run.results), path)


def format_run(run: Run, name: str | None = None) -> str:
    """The TREC run text of `run` (what save_run writes); raises like save_run."""
    tag = run.name if name is None else name
    _check_token(tag, "run name")
    lines = []
    for query_id, hits in run.results.items():
        _check_token(query_id, "query_id")
        for rank, hit in enumerate(hits, start=1):
            _check_token(hit.doc_id, "doc_id")
            score = float(hit.score)
            if not math.isfinite(score):
                raise UsageError(f"query {query_id!r}, doc {hit.doc_id!r}: score {score} is not finite")
            lines.append(f"{query_id} Q0 {hit.doc_id} {rank} {score!r} {tag}\n")
    return "".join(lines)


def load_run(path: str | os.PathLike) -> Run:
    """Read a TREC run file.

    Each query's hits are sorted by score descending, then by the rank column (then doc_id), so tied
    scores keep the order the system wrote. The run name is taken from the first line.

    Args:
        path: File to read (UTF-8, gzip-compressed or not). Blank lines are skipped.

    Returns:
        The Run, queries in order of first appearance.

    Raises:
        FileNotFoundError: `path` does not exist.
        DataFormatError: the file is not UTF-8 text, a line does not have 6 columns, its rank is not an integer, its score is not
            a finite number, or it repeats a (query_id, doc_id) pair; the message names file and line.

    Examples:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "bm25.trec"
        >>> _ = p.write_text("q1 Q0 d3 2 1.0 bm25\\nq1 Q0 d7 1 2.5 bm25\\n")
        >>> load_run(p).doc_ids("q1")
        ['d7', 'd3']
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"run file not found: {path}")
    results: dict[str, list[ScoredDoc]] = {}
    first_line: dict[tuple[str, str], int] = {}
    name: str | None = None
    for line_no, line in read_lines(path):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 6:
            raise DataFormatError(
                f"{path}:{line_no}: expected 6 columns (query_id Q0 doc_id rank score name), "
                f"got {len(fields)}: {line.rstrip()!r}"
            )
        query_id, _, doc_id, rank_text, score_text, tag = fields
        try:
            rank = int(rank_text)
        except ValueError:
            raise DataFormatError(f"{path}:{line_no}: rank must be an integer, got {rank_text!r}") from None
        try:
            score = float(score_text)
        except ValueError:
            raise DataFormatError(f"{path}:{line_no}: score must be a number, got {score_text!r}") from None
        if not math.isfinite(score):
            raise DataFormatError(f"{path}:{line_no}: score must be finite, got {score_text!r}")
        key = (query_id, doc_id)
        if key in first_line:
            raise DataFormatError(
                f"{path}:{line_no}: duplicate doc_id {doc_id!r} for query {query_id!r} "
                f"(first on line {first_line[key]})"
            )
        first_line[key] = line_no
        if name is None:
            name = tag
        results.setdefault(query_id, []).append((score, rank, doc_id))
    ordered = {}
    for query_id, rows in results.items():
        rows.sort(key=lambda row: (-row[0], row[1], row[2]))  # ties keep the file's rank order
        ordered[query_id] = [ScoredDoc(doc_id, score) for score, _, doc_id in rows]
    results = ordered
    return Run(results=results, name=name if name is not None else Run().name)


def _check_token(value: str, what: str) -> None:
    if not value or any(c.isspace() for c in str(value)):
        raise UsageError(f"{what} {value!r} is empty or contains whitespace; a TREC run cannot hold it")
