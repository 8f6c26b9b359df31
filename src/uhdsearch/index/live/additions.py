"""Documents added to a segmented index since its last commit, held in memory until a commit writes them."""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from uhdsearch.errors import DataFormatError, DimensionMismatchError, UsageError
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.sparse import SparseEncoding


def check_additions(encoding: SparseEncoding, doc_ids: Sequence[str], dim: int, n_buckets: int) -> list[str]:
    """`doc_ids` as strings, once they and `encoding` are fit to add to an index of this dim and bucket count.

    Raises:
        TypeError: `encoding` is not a SparseEncoding.
        DimensionMismatchError: the encoding's dim or bucket count differs from the index's.
        ValueError: not one id per encoded document, or an id with a line break.
        DataFormatError: duplicate ids.
    """
    if not isinstance(encoding, SparseEncoding):
        raise TypeError(f"encoding must be a SparseEncoding, got {type(encoding).__name__}")
    if encoding.dim != dim or encoding.n_buckets != n_buckets:
        raise DimensionMismatchError(
            f"the documents have dim={encoding.dim} and {encoding.n_buckets} buckets but the index has "
            f"dim={dim} and {n_buckets} buckets; encode them with the index's encoder"
        )
    doc_ids = [str(d) for d in doc_ids]
    if len(doc_ids) != encoding.n:
        raise UsageError(f"{len(doc_ids)} doc_ids for {encoding.n} encoded documents")
    if any("\n" in d or "\r" in d for d in doc_ids):
        raise UsageError("doc_ids may not contain line breaks")
    if len(set(doc_ids)) != len(doc_ids):
        seen: set[str] = set()
        twice = [d for d in doc_ids if d in seen or seen.add(d)]
        raise DataFormatError(f"duplicate doc_ids in one add: {twice[:5]}; every document needs a unique id")
    return doc_ids


class PendingAdditions:
    """Uncommitted additions: the encodings as added and doc_id -> (chunk, row), in insertion order.

    Iterating gives the doc_ids in that order, which is the order of their global doc numbers.
    """

    def __init__(self) -> None:
        self._chunks: list[SparseEncoding] = []
        self._rows: dict[str, tuple[int, int]] = {}
        self._index: InvertedIndex | None = None  # searchable copy, built on first use after a change

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def add(self, encoding: SparseEncoding, doc_ids: Sequence[str]) -> None:
        """Row i of `encoding` is `doc_ids[i]`; none of the ids may be pending already."""
        chunk = len(self._chunks)
        self._chunks.append(encoding)
        for row, d in enumerate(doc_ids):
            self._rows[d] = (chunk, row)
        self._index = None

    def discard(self, doc_id: str) -> bool:
        """Drop one pending document; returns whether it was pending."""
        if doc_id not in self._rows:
            return False
        del self._rows[doc_id]
        self._index = None
        return True

    def clear(self) -> None:
        self._chunks, self._rows, self._index = [], {}, None

    def encoding(self) -> tuple[SparseEncoding, list[str]]:
        """The pending documents' vectors and ids, in insertion order (discarded rows left out)."""
        starts = np.cumsum([0] + [c.n for c in self._chunks])
        rows = np.array([starts[c] + r for c, r in self._rows.values()], dtype=np.int64)
        return SparseEncoding.concat(self._chunks)[rows], list(self._rows)

    def index(self, index_class: type[InvertedIndex], encoder_digest: str | None) -> InvertedIndex:
        """An in-memory index of the pending documents, so that the writer can search its own changes."""
        if self._index is None:
            encoding, ids = self.encoding()
            self._index = index_class.from_encoding(encoding, ids, None, encoder_digest=encoder_digest)
        return self._index
