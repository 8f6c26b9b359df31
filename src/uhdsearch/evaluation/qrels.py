"""Read and write relevance judgments (qrels) in BEIR TSV and TREC formats. Nothing else parses them."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Literal

from uhdsearch.errors import DataFormatError, UsageError
from uhdsearch.io import atomic_write_text, read_lines
from uhdsearch.types import Qrels

logger = logging.getLogger(__name__)

BEIR_HEADER = ("query-id", "corpus-id", "score")
RELEVANCE_LIMIT = 2 ** 31  # trec_eval (ir_measures' pytrec_eval) holds relevance in a C int


def load_qrels(path: str | os.PathLike) -> Qrels:
    """Read qrels from a BEIR TSV file or a TREC qrels file.

    Two layouts are accepted, told apart by the first non-blank line and then required on every line:

    - BEIR: an optional header ``query-id<TAB>corpus-id<TAB>score``, then three columns per line.
    - TREC: ``query-id iteration doc-id relevance``, four whitespace-separated columns, no header.

    Judgments with relevance <= 0 are kept: ir_measures counts them as judged non-relevant.
    Blank lines are skipped.

    Args:
        path: File to read (UTF-8, gzip-compressed or not).

    Returns:
        query_id -> doc_id -> relevance, queries and documents in file order.

    Raises:
        FileNotFoundError: `path` does not exist.
        DataFormatError: the file is not UTF-8 text, a line has the wrong number of columns, a relevance that is not an integer,
            or repeats a (query_id, doc_id) pair; the message names the file and the 1-based line.

    Examples:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "test.tsv"
        >>> _ = p.write_text("query-id\\tcorpus-id\\tscore\\nq1\\td7\\t1\\n")
        >>> load_qrels(p)
        {'q1': {'d7': 1}}
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"qrels file not found: {path}")
    qrels: Qrels = {}
    first_line: dict[tuple[str, str], int] = {}
    n_columns: int | None = None
    for line_no, line in read_lines(path):
        if not line.strip():
            continue
        fields = line.split()
        if n_columns is None:
            if tuple(column.lower() for column in fields) == BEIR_HEADER:
                n_columns = 3
                continue
            n_columns = len(fields)
            if n_columns not in (3, 4):
                raise DataFormatError(
                    f"{path}:{line_no}: expected 3 columns (BEIR: query-id corpus-id score) or "
                    f"4 (TREC: query-id iteration doc-id relevance), got {n_columns}: {line.rstrip()!r}"
                )
        if len(fields) != n_columns:
            layout = (
                "BEIR: query-id corpus-id score" if n_columns == 3
                else "TREC: query-id iteration doc-id relevance"
            )
            raise DataFormatError(
                f"{path}:{line_no}: expected {n_columns} columns ({layout}) like the first line, "
                f"got {len(fields)}: {line.rstrip()!r}"
            )
        query_id, doc_id, relevance_text = (fields[0], fields[1], fields[2]) if n_columns == 3 else (
            fields[0], fields[2], fields[3])
        try:
            relevance = int(relevance_text)
        except ValueError:
            raise DataFormatError(
                f"{path}:{line_no}: relevance must be an integer, got {relevance_text!r}"
            ) from None
        if not -RELEVANCE_LIMIT <= relevance < RELEVANCE_LIMIT:
            raise DataFormatError(f"{path}:{line_no}: relevance {relevance_text} is outside the 32-bit integers "
                                  f"that trec_eval reads ({-RELEVANCE_LIMIT}..{RELEVANCE_LIMIT - 1})")
        key = (query_id, doc_id)
        if key in first_line:
            raise DataFormatError(
                f"{path}:{line_no}: duplicate judgment for query {query_id!r} and document {doc_id!r} "
                f"(first on line {first_line[key]})"
            )
        first_line[key] = line_no
        qrels.setdefault(query_id, {})[doc_id] = relevance
    logger.debug("read %d judgments for %d queries from %s", len(first_line), len(qrels), path)
    return qrels


def save_qrels(qrels: Qrels, path: str | os.PathLike, format: Literal["trec", "beir"] = "trec") -> None:
    """Write qrels atomically, in TREC (``qid 0 docid rel``) or BEIR TSV (with header) format.

    Args:
        qrels: query_id -> doc_id -> relevance.
        path: File to write; replaced if it exists.
        format: ``"trec"`` or ``"beir"``.

    Raises:
        ValueError: unknown `format`, or an id that is empty or contains whitespace (neither format
            could be read back).

    Examples:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "qrels.txt"
        >>> save_qrels({"q1": {"d7": 1}}, p)
        >>> p.read_text()
        'q1 0 d7 1\\n'
    """
    if format not in ("trec", "beir"):
        raise UsageError(f"format={format!r} is not supported; use 'trec' or 'beir'")
    lines = ["\t".join(BEIR_HEADER)] if format == "beir" else []
    for query_id, judged in qrels.items():
        _check_id(query_id, "query_id")
        for doc_id, relevance in judged.items():
            _check_id(doc_id, "doc_id")
            if format == "beir":
                lines.append(f"{query_id}\t{doc_id}\t{int(relevance)}")
            else:
                lines.append(f"{query_id} 0 {doc_id} {int(relevance)}")
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def _check_id(value: str, what: str) -> None:
    if not value or any(c.isspace() for c in str(value)):
        raise UsageError(f"{what} {value!r} is empty or contains whitespace; TREC and BEIR files cannot hold it")
