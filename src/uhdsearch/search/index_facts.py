"""IndexFacts: what searches derive from one index (document frequencies, the doc-number map, rerank's vectors),
each built once, on first use, by one thread while the others wait."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from uhdsearch.errors import DimensionMismatchError


class IndexFacts:
    """Lazily built, thread-safe facts about one index (an index snapshot never changes, so neither do they).

    Examples:
        >>> import scipy.sparse as sp
        >>> from uhdsearch.index.inverted import BinaryIndex
        >>> from uhdsearch.sparse import SparseEncoding
        >>> docs = SparseEncoding([sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 1, 1, 0]], np.float32))])
        >>> facts = IndexFacts(BinaryIndex.from_encoding(docs, ["a", "b"], None))
        >>> facts.document_frequencies[0].tolist(), facts.doc_numbers["b"]
        ([1, 2, 1, 0], 1)
    """

    def __init__(self, index, document_frequencies: list[np.ndarray] | None = None) -> None:
        self.index = index
        self._lock = threading.RLock()  # one fact may be built from another
        self._built: dict[str, Any] = {}
        if document_frequencies is not None:  # the caller read them already
            if len(document_frequencies) != index.n_buckets or any(
                    np.shape(f) != (index.dim,) for f in document_frequencies):
                raise DimensionMismatchError(f"document_frequencies: give one ({index.dim},) array per bucket "
                                             f"({index.n_buckets})")
            self._built["document_frequencies"] = [np.asarray(f, np.int64) for f in document_frequencies]

    def _once(self, key: str, build: Callable[[], Any]) -> Any:
        found = self._built.get(key)
        if found is None:
            with self._lock:
                found = self._built.get(key)
                if found is None:
                    found = self._built[key] = build()
        return found

    @property
    def document_frequencies(self) -> list[np.ndarray]:
        """Per bucket, (dim,) int64 live documents per dimension (a segmented index sums its segments')."""
        index = self.index
        return self._once("document_frequencies", lambda: [
            np.asarray(index.document_frequencies(b), np.int64) for b in range(index.n_buckets)])

    @property
    def rank_idf(self) -> list[np.ndarray]:
        """Per bucket, log((n + 1) / (df + 1)): query_selection="value-idf" ranks query dims by value x this."""
        n = self.index.n_documents
        return self._once("rank_idf", lambda: [np.log((n + 1) / (df + 1)) for df in self.document_frequencies])

    @property
    def doc_numbers(self) -> dict[str, int]:
        """doc_id -> doc number, live documents only (rerank's candidates are looked up here)."""
        return self._once("doc_numbers", lambda: {d: n for n, d in enumerate(self.index.doc_ids) if d is not None})

    @property
    def binary_vectors(self):
        """The index's document vectors, binarized (rerank's exact integer overlaps)."""
        return self._once("binary_vectors", lambda: self.index.document_vectors().binarize())
