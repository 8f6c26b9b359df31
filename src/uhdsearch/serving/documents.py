"""The texts behind the index's doc ids: a BEIR corpus given with --data, plus documents added through the API.

Added documents are appended to `<index>/added_documents.jsonl` (fsynced before the index commit that makes them
visible), so that a restarted server still shows their texts. A line cut by a crash is skipped.
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

    def __init__(self, corpus: dict[str, Document] | None = None, added_path: Path | None = None) -> None:
        self._documents: dict[str, Document] = dict(corpus or {})
        self._added_path = added_path
        self._lock = threading.Lock()
        if added_path is not None and added_path.is_file():
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


def _read_added(path: Path) -> dict[str, Document]:
    found: dict[str, Document] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
            found[str(row["_id"])] = Document(str(row["_id"]), str(row.get("text") or ""), str(row.get("title") or ""))
        except (ValueError, KeyError, TypeError):
            logger.warning("%s line %d is not a document (a write cut short?); skipped", path, number)
    return found
