"""The texts behind the index's doc ids: a BEIR corpus given with --data, plus documents added through the API.

Added documents are appended to `<index>/added_documents.jsonl`, each line tagged with the generation of the index
commit that publishes it. The lines are written and fsynced inside that commit, after its segment and before its
commit file (`SegmentedIndex.commit(before_publish=...)`), so the one rename that publishes the commit publishes
its texts too: a line whose generation no commit on disk reaches belongs to a commit that never finished. Readers
skip such lines, and the writer cuts them off when it opens the store, as it cuts a last line torn by a crash (no
newline): the next append would otherwise join it. Lines without a generation (written before the tag) count as
committed.

Each committed snapshot sees its own `Texts`: a search that started on the previous snapshot never shows a text
that a later commit replaced, and a text never shows before its vector.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from uhdsearch.types import Document

logger = logging.getLogger(__name__)

ADDED_FILE = "added_documents.jsonl"
MAX_LAYERS = 8  # commits' texts kept as separate layers before they are folded into one dict


class Texts:
    """doc_id -> Document of one committed snapshot; never changed (a commit makes a new one with `added`)."""

    def __init__(self, layers: tuple[dict[str, Document], ...] = ()) -> None:
        self._layers = layers  # oldest first; a later layer's text replaces an earlier one's

    def get(self, doc_id: str) -> Document | None:
        for layer in reversed(self._layers):
            found = layer.get(doc_id)
            if found is not None:
                return found
        return None

    def __bool__(self) -> bool:
        return any(self._layers)

    def values(self) -> Iterator[Document]:
        """Every text once (the newest where a doc_id was given twice)."""
        return iter(self._merged().values())

    def added(self, documents: list[Document]) -> Texts:
        """These texts with `documents` over them (a dict of all of them every MAX_LAYERS commits: lookups stay
        a few dict probes, and no commit copies the whole corpus)."""
        if not documents:
            return self
        layers = self._layers + ({d.doc_id: d for d in documents},)
        return Texts((Texts(layers)._merged(),) if len(layers) > MAX_LAYERS else layers)

    def _merged(self) -> dict[str, Document]:
        if len(self._layers) == 1:
            return self._layers[0]
        merged: dict[str, Document] = {}
        for layer in self._layers:
            merged.update(layer)
        return merged


class DocumentStore:
    """The committed texts (`texts`) and the file that keeps the added ones; writes go through one writer."""

    def __init__(self, corpus: dict[str, Document] | None = None, added_path: Path | None = None,
                 writer: bool = False, generation: int | None = None) -> None:
        """writer: this process holds the index's write lock (a reader must not cut what a writer appends now).
        generation: the index commit being served; added texts of later generations are not (yet) committed."""
        documents: dict[str, Document] = dict(corpus or {})
        self._added_path = added_path
        self._lock = threading.Lock()
        self._staged: int | None = None  # the file's size before the texts of a commit under way
        if added_path is not None and added_path.is_file():
            if writer:
                _cut_uncommitted(added_path, generation)
            documents.update(_read_added(added_path, generation))
        self.texts = Texts((documents,))

    def __len__(self) -> int:
        return sum(1 for _ in self.texts.values())

    def get(self, doc_id: str) -> Document | None:
        """The text of the newest commit (a search holds its snapshot's `texts` instead)."""
        return self.texts.get(doc_id)

    def sample(self, n: int) -> list[Document]:
        """Up to n documents spread evenly over the store (for the typical-token statistics)."""
        documents = list(self.texts.values())
        step = max(1, len(documents) // max(n, 1))
        return documents[::step][:n]

    def stage(self, documents: list[Document], generation: int) -> None:
        """Append the texts of the commit of `generation` durably; they count once that commit's file exists.

        Call inside the commit, after its segment is durable and before its commit file is written.
        """
        with self._lock:
            if self._added_path is None or not documents:
                return
            lines = "".join(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.text,
                                        "generation": generation}) + "\n" for d in documents)
            with open(self._added_path, "a", encoding="utf-8") as f:
                self._staged = f.seek(0, os.SEEK_END)
                f.write(lines)
                f.flush()
                os.fsync(f.fileno())

    def unstage(self) -> None:
        """Cut the texts `stage` appended for a commit that failed before its commit file was written."""
        with self._lock:
            if self._staged is None or self._added_path is None:
                return
            with open(self._added_path, "rb+") as f:
                f.truncate(self._staged)
                f.flush()
                os.fsync(f.fileno())
            self._staged = None

    def publish(self, documents: list[Document]) -> Texts:
        """The texts of the commit just written: the previous ones with `documents` over them."""
        with self._lock:
            self._staged = None
            self.texts = self.texts.added(documents)
            return self.texts


def _generation(row: dict) -> int:
    value = row.get("generation", 0)  # untagged lines were written before the tag: committed
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _lines(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(start, end, line) of each whole line (with its newline); a last line without one is torn."""
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return
        yield start, end + 1, data[start:end]
        start = end + 1


def _cut_uncommitted(path: Path, generation: int | None) -> None:
    """Truncate the file before its first line that no commit published: a torn last line, or a text of a later
    generation than `generation` (its commit never finished). Lines are appended in generation order."""
    data = path.read_bytes()
    keep = 0
    for start, end, line in _lines(data):
        try:
            row = json.loads(line)
            later = generation is not None and _generation(row) > generation
        except (ValueError, TypeError, AttributeError):
            later = False  # not a document: readers skip it with a warning
        if later:
            break
        keep = end
    if keep == len(data):
        return
    logger.warning("%s: cut off %d bytes after the last committed text (a crash during a commit or an append)",
                   path, len(data) - keep)
    with open(path, "rb+") as f:
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())


def _read_added(path: Path, generation: int | None) -> dict[str, Document]:
    found: dict[str, Document] = {}
    for number, (_, _, line) in enumerate(_lines(path.read_bytes()), 1):
        try:
            row = json.loads(line)
            if generation is not None and _generation(row) > generation:
                continue  # a commit under way (or one that never finished)
            found[str(row["_id"])] = Document(str(row["_id"]), str(row.get("text") or ""), str(row.get("title") or ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            logger.warning("%s line %d is not a document (a write cut short?); skipped", path, number)
    return found
