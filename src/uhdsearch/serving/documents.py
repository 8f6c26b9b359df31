"""The texts behind the index's doc ids: a BEIR corpus given with --data, plus documents added through the API.

Added documents are appended to `<index>/added_documents.jsonl` (fsynced before the index commit that makes them
visible), so that a restarted server still shows their texts. A last line cut by a crash (no newline: its
append, and so its commit, never finished) is cut off when the writer opens the store: the next append would
otherwise join it and be lost with it. Readers skip it.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from uhdsearch.types import Document

logger = logging.getLogger(__name__)

ADDED_FILE = "added_documents.jsonl"


class DocumentStore:
    """doc_id -> Document; reads are lock-free (a dict lookup), writes append under a lock."""

    def __init__(self, corpus: dict[str, Document] | None = None, added_path: Path | None = None,
                 writer: bool = False) -> None:
        """writer: this process holds the index's write lock (a reader must not cut what a writer appends now)."""
        self._documents: dict[str, Document] = dict(corpus or {})
        self._added_path = added_path
        self._lock = threading.Lock()
        if added_path is not None and added_path.is_file():
            if writer:
                _cut_torn_tail(added_path)
            self._documents.update(_read_added(added_path))

    def __len__(self) -> int:
        return len(self._documents)

    def get(self, doc_id: str) -> Document | None:
        return self._documents.get(doc_id)

    def sample(self, n: int) -> list[Document]:
        """Up to n documents spread evenly over the store (for the typical-token statistics)."""
        documents = list(self._documents.values())
        step = max(1, len(documents) // max(n, 1))
        return documents[::step][:n]

    def save_added(self, documents: list[Document]) -> None:
        """Append documents durably, then make them visible to lookups."""
        with self._lock:
            if self._added_path is not None and documents:
                lines = "".join(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.text}) + "\n"
                                for d in documents)
                with open(self._added_path, "a", encoding="utf-8") as f:
                    f.write(lines)
                    f.flush()
                    os.fsync(f.fileno())
            self._documents.update({d.doc_id: d for d in documents})


def _cut_torn_tail(path: Path) -> None:
    """Truncate the file after its last newline, when something follows it."""
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return
        keep = size
        while keep > 0:  # back to the last newline, in blocks
            start = max(0, keep - 65536)
            f.seek(start)
            block = f.read(keep - start)
            found = block.rfind(b"\n")
            if found >= 0:
                keep = start + found + 1
                break
            keep = start
        logger.warning("%s ends in %d bytes of a line cut short (a crash during an append); cut off", path,
                       size - keep)
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())


def _read_added(path: Path) -> dict[str, Document]:
    found: dict[str, Document] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
            found[str(row["_id"])] = Document(str(row["_id"]), str(row.get("text") or ""), str(row.get("title") or ""))
        except (ValueError, KeyError, TypeError):
            logger.warning("%s line %d is not a document (a write cut short?); skipped", path, number)
    return found
