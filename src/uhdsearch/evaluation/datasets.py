"""BEIR-layout loader: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` in one directory."""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uhdsearch.errors import DataFormatError
from uhdsearch.evaluation.qrels import load_qrels
from uhdsearch.io import read_lines
from uhdsearch.types import DUPLICATE_HINT, Document, Qrels, Query, check_on_duplicate, report_duplicates

logger = logging.getLogger(__name__)

__all__ = [
    "BeirData",
    "bundled_dataset_dir",
    "iter_jsonl",
    "load_beir",
    "load_corpus",
    "load_qrels",
    "load_queries",
]


@dataclass
class BeirData:
    """One split of a BEIR-layout collection.

    Attributes:
        name: The collection's directory name, e.g. ``"scifact"``.
        split: The qrels split that was loaded, e.g. ``"test"``.
        corpus: doc_id -> Document, in ``corpus.jsonl`` order.
        queries: The queries judged in this split, in ``queries.jsonl`` order.
        qrels: query_id -> doc_id -> relevance for this split.
    """

    name: str
    split: str
    corpus: dict[str, Document]
    queries: list[Query]
    qrels: Qrels


def load_beir(data_dir: str | os.PathLike, split: str = "test", on_duplicate: str = "error") -> BeirData:
    """Load a BEIR-layout directory: the whole corpus and the queries and qrels of one split.

    Args:
        data_dir: Directory holding ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``; each may be
            gzip-compressed instead (``corpus.jsonl.gz``).
        split: Which qrels file to use (``"test"``, ``"dev"``, ``"train"``).
        on_duplicate: a query_id twice in ``queries.jsonl``: "error" (default), "first" or "last" (`load_queries`).

    Returns:
        A BeirData whose ``queries`` are only those that have judgments in `split`.

    Raises:
        FileNotFoundError: `data_dir` or one of its files is missing; for a missing split the
            message lists the splits that exist.
        DataFormatError: a file is malformed (the message names file and line), the corpus is empty,
            the split has no judgments, or the qrels name a query that ``queries.jsonl`` lacks.

    Examples:
        >>> data = load_beir(bundled_dataset_dir("scifact"), split="test")
        >>> len(data.corpus), len(data.queries), data.queries[0].query_id
        (5183, 300, '1')
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"BEIR data directory not found: {data_dir}")
    qrels_dir = data_dir / "qrels"
    qrels_path = _plain_or_gzip(qrels_dir / f"{split}.tsv")
    if not qrels_path.is_file():
        available = sorted({p.name.split(".")[0] for p in qrels_dir.glob("*.tsv*")}) if qrels_dir.is_dir() else []
        raise FileNotFoundError(
            f"no qrels for split {split!r} in {qrels_dir}; available: {', '.join(available) or 'none'}"
        )
    corpus = load_corpus(_plain_or_gzip(data_dir / "corpus.jsonl"))
    all_queries = load_queries(_plain_or_gzip(data_dir / "queries.jsonl"), on_duplicate)
    qrels = load_qrels(qrels_path)
    if not qrels:
        raise DataFormatError(f"{qrels_path} has no judgments")

    missing = [q for q in qrels if q not in all_queries]
    if missing:
        shown = ", ".join(repr(q) for q in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise DataFormatError(
            f"{qrels_path} judges {len(missing)} queries that {data_dir / 'queries.jsonl'} does not have: {shown}"
        )
    n_unknown_docs = sum(1 for judged in qrels.values() for d in judged if d not in corpus)
    if n_unknown_docs:
        logger.warning("%s: %d judgments name documents that are not in the corpus", qrels_path, n_unknown_docs)
    queries = [q for q in all_queries.values() if q.query_id in qrels]
    logger.info("loaded %s/%s: %d documents, %d queries", data_dir.name, split, len(corpus), len(queries))
    return BeirData(name=data_dir.name, split=split, corpus=corpus, queries=queries, qrels=qrels)


def load_corpus(path: str | os.PathLike) -> dict[str, Document]:
    """Read a BEIR ``corpus.jsonl``: one ``{"_id", "title", "text"}`` object per line.

    ``title`` may be missing or null (read as ""); integer ids are turned into strings.

    Args:
        path: The JSONL file.

    Returns:
        doc_id -> Document, in file order.

    Raises:
        FileNotFoundError: `path` does not exist.
        DataFormatError: malformed JSON, a line that is not an object, a missing or non-string ``_id``,
            a missing or non-string ``text``, a ``title`` that is neither a string nor null, a repeated
            doc_id, or no documents.
    """
    path = Path(path)
    corpus: dict[str, Document] = {}
    first_line: dict[str, int] = {}
    for line_no, obj in iter_jsonl(path):
        doc_id = _read_id(obj, path, line_no)
        text = _read_text(obj, "text", path, line_no, required=True)
        title = _read_text(obj, "title", path, line_no, required=False)
        if doc_id in first_line:
            raise DataFormatError(
                f"{path}:{line_no}: duplicate doc_id {doc_id!r} (first on line {first_line[doc_id]})"
            )
        first_line[doc_id] = line_no
        corpus[doc_id] = Document(doc_id=doc_id, text=text, title=title)
    if not corpus:
        raise DataFormatError(f"{path} has no documents")
    return corpus


def load_queries(path: str | os.PathLike, on_duplicate: str = "error") -> dict[str, Query]:
    """Read a BEIR ``queries.jsonl``: one ``{"_id", "text"}`` object per line.

    Args:
        path: The JSONL file.
        on_duplicate: a query_id on two lines is an error ("error", the default), or the "first" or "last" of
            them is kept (at its own place in file order) and one warning gives the count
            (`uhdsearch.types.as_queries` does the same for queries given in Python).

    Returns:
        query_id -> Query, in file order.

    Raises:
        FileNotFoundError: `path` does not exist.
        DataFormatError: malformed JSON, a line that is not an object, a missing or non-string ``_id``,
            a missing or non-string ``text``, or a repeated query_id (when `on_duplicate` is "error").
        UsageError: an unknown `on_duplicate`.
    """
    check_on_duplicate(on_duplicate)
    path = Path(path)
    queries: dict[str, Query] = {}
    first_line: dict[str, int] = {}
    dropped, repeated = 0, set()
    for line_no, obj in iter_jsonl(path):
        query_id = _read_id(obj, path, line_no)
        text = _read_text(obj, "text", path, line_no, required=True)
        if query_id in first_line:
            if on_duplicate == "error":
                raise DataFormatError(f"{path}:{line_no}: duplicate query_id {query_id!r} (first on line "
                                      f"{first_line[query_id]}); query ids must be unique, {DUPLICATE_HINT}")
            dropped += 1
            repeated.add(query_id)
            if on_duplicate == "first":
                continue
            del queries[query_id]  # "last": the later line's query, at the later line's place
        first_line.setdefault(query_id, line_no)
        queries[query_id] = Query(query_id=query_id, text=text)
    if repeated:
        report_duplicates(dropped, len(repeated), on_duplicate, str(path))
    return queries


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file.

    Args:
        path: The JSONL file (UTF-8, gzip-compressed or not).

    Returns:
        An iterator of (1-based line number, parsed JSON object).

    Raises:
        FileNotFoundError: `path` does not exist.
        DataFormatError: a line is not UTF-8, not valid JSON or not a JSON object; the message names file and
            line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    for line_no, line in read_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataFormatError(f"{path}:{line_no}: malformed JSON: {e.msg} (column {e.colno})") from None
        except RecursionError:
            raise DataFormatError(f"{path}:{line_no}: JSON nested too deeply") from None
        if not isinstance(obj, dict):
            raise DataFormatError(f"{path}:{line_no}: expected a JSON object, got {type(obj).__name__}")
        yield line_no, obj


def bundled_dataset_dir(name: str = "scifact") -> Path:
    """Return the directory of a collection shipped inside the package (BEIR layout).

    Args:
        name: Collection name; ``"scifact"`` is the one shipped.

    Returns:
        The directory, e.g. ``.../uhdsearch/data/scifact``.

    Raises:
        FileNotFoundError: no such collection ships with this installation.

    Examples:
        >>> bundled_dataset_dir("scifact").name
        'scifact'
    """
    data_root = Path(__file__).resolve().parent.parent / "data"
    path = data_root / name
    if not (path / "corpus.jsonl").is_file():
        shipped = []
        if data_root.is_dir():
            shipped = sorted(p.name for p in data_root.iterdir() if (p / "corpus.jsonl").is_file())
        raise FileNotFoundError(
            f"no bundled dataset {name!r} at {path}; bundled: {', '.join(shipped) or 'none'}"
        )
    return path


def _read_id(obj: dict[str, Any], path: Path, line_no: int) -> str:
    if "_id" not in obj:
        raise DataFormatError(
            f"{path}:{line_no}: missing '_id' (found keys: {', '.join(sorted(obj)) or 'none'})"
        )
    value = obj["_id"]
    # JSON numbers are accepted as ids because several BEIR files write them unquoted; ids are strings here.
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataFormatError(f"{path}:{line_no}: '_id' must be a string, got {type(value).__name__}")
    value = str(value)
    if not value or any(c.isspace() for c in value):
        raise DataFormatError(f"{path}:{line_no}: '_id' {value!r} is empty or contains whitespace; "
                              "TREC runs and qrels cannot hold it")
    _check_unicode(value, "'_id'", path, line_no)
    return value


def _read_text(obj: dict[str, Any], key: str, path: Path, line_no: int, required: bool) -> str:
    if key not in obj:
        if required:
            raise DataFormatError(
                f"{path}:{line_no}: missing {key!r} (found keys: {', '.join(sorted(obj)) or 'none'})"
            )
        return ""
    value = obj[key]
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise DataFormatError(f"{path}:{line_no}: {key!r} must be a string, got {type(value).__name__}")
    _check_unicode(value, repr(key), path, line_no)
    return value


def _check_unicode(value: str, what: str, path: Path, line_no: int) -> None:
    # JSON escapes can spell lone surrogates (\\ud800), which no tokenizer or UTF-8 file can take.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataFormatError(f"{path}:{line_no}: {what} holds a lone surrogate {value[exc.start]!r} "
                              f"at character {exc.start + 1}: not valid Unicode text") from None


def _plain_or_gzip(path: Path) -> Path:
    """`path`, or its gzip-compressed twin ``path.gz`` where only that exists."""
    gz = path.with_name(path.name + ".gz")
    return gz if not path.exists() and gz.exists() else path
