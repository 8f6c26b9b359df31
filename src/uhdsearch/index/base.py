"""The searchable-index contract: what a searcher needs from an index, static (InvertedIndex) or live (SegmentedIndex).

Also the one argument check of every `search_encoded`, and the one reading of its padded result arrays.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Literal, Protocol, runtime_checkable

import numpy as np

from uhdsearch.errors import DimensionMismatchError, UsageError
from uhdsearch.index.format import Variant
from uhdsearch.sparse import SparseEncoding
from uhdsearch.types import check_k

Scoring = Literal["binary", "weighted", "quantized"]
SCORINGS = ("binary", "weighted", "quantized")  # quantized: integer query weights x binary documents


@runtime_checkable
class SearchableIndex(Protocol):
    """An index that `search_encoded` answers exactly; InvertedIndex and SegmentedIndex implement it.

    Doc numbers index `doc_ids`; a segmented index keeps None there for deleted documents (never returned).

    Examples:
        >>> import scipy.sparse as sp
        >>> from uhdsearch.index.inverted import BinaryIndex
        >>> docs = SparseEncoding([sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 1, 1, 0]], np.float32))])
        >>> isinstance(BinaryIndex.from_encoding(docs, ["a", "b"], None), SearchableIndex)
        True
    """

    path: Path | None

    @property
    def dim(self) -> int: ...

    @property
    def n_buckets(self) -> int: ...

    @property
    def variant(self) -> Variant: ...

    @property
    def doc_ids(self) -> Sequence[str | None]: ...

    @property
    def n_documents(self) -> int: ...

    @property
    def encoder_digest(self) -> str | None: ...

    def search_encoded(
        self, queries: SparseEncoding, k: int, bucket_weights: Sequence[float], scoring: Scoring,
        deleted: np.ndarray | None = None, n_threads: int | None = None, length_norm: float = 0.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k doc numbers and scores per query row, padded with -1 and 0 (see InvertedIndex's)."""
        ...

    def document_frequencies(self, bucket: int = 0) -> np.ndarray:
        """(dim,) int64 number of (live) documents in which each dimension of `bucket` is active."""
        ...

    def warm_up(self, background: bool = False) -> threading.Thread | None:
        """Fault memory-mapped pages in now rather than during the first searches."""
        ...

    # What a search may ask beyond search_encoded (IndexCapabilities below gives each its cautious default);
    # searches read these members rather than probing attributes.
    stop_dimensions_by_default: ClassVar[bool]
    length_norm_supported: ClassVar[bool]
    answers_overlap_counts: ClassVar[bool]
    has_document_vectors: ClassVar[bool]
    scores_own_contributions: ClassVar[bool]
    searches_document_ranges: ClassVar[bool]
    takes_writes: ClassVar[bool]

    def keep_forward(self, max_share: float, n_queries: int = 0, after: int = 0) -> None: ...


class IndexCapabilities:
    """SearchableIndex's capability members with their cautious defaults; every index class inherits them and
    overrides what it can do."""

    stop_dimensions_by_default = True  # max_df="auto" may drop stop dims (impact planes: no)
    length_norm_supported = True  # its dims are the documents' active dims (impact planes: no)
    answers_overlap_counts = False  # overlap_counts(): the cascade's second pass
    has_document_vectors = False  # document_vectors(): rerank's exact binary overlaps
    scores_own_contributions = False  # contributions(): /explain's per-dim scores
    searches_document_ranges = False  # search_encoded(..., documents=(lo, hi)): one document's dims, cheaply
    takes_writes = False  # a segmented index: add, delete, commit (open_index(writable=True))
    generation: int | None = None  # the commit a segmented index reads; None for a static one

    def keep_forward(self, max_share: float, n_queries: int = 0, after: int = 0) -> None:
        """Keep doc-major rows of the dims active in more than `max_share` of the documents (the cascade's
        second pass); without them overlap_counts probes the postings."""
        return None


def hits_per_query(
    numbers: np.ndarray, scores: np.ndarray, doc_ids: Sequence[str | None]
) -> list[list[tuple[str, float]]]:
    """`search_encoded`'s padded arrays -> per query, its (doc_id, score) hits, best first; padding dropped.

    Examples:
        >>> hits_per_query(np.array([[2, 0, -1], [-1, -1, -1]]), np.array([[3.0, 1.5, 0.0], [0.0, 0.0, 0.0]]),
        ...                ["a", "b", "c"])
        [[('c', 3.0), ('a', 1.5)], []]
    """
    return [[(doc_ids[d], s) for d, s in zip(row_numbers, row_scores) if d >= 0]
            for row_numbers, row_scores in zip(np.asarray(numbers).tolist(), np.asarray(scores).tolist())]


def check_search_args(index: SearchableIndex, queries, k, bucket_weights, scoring, deleted, n_threads,
                      length_norm: float = 0.0) -> None:
    """The argument checks of every `search_encoded` (InvertedIndex and SegmentedIndex)."""
    if not isinstance(queries, SparseEncoding):
        raise TypeError(f"queries must be a SparseEncoding, got {type(queries).__name__}")
    if queries.dim != index.dim:
        raise DimensionMismatchError(f"the queries have dim={queries.dim} but the index has dim={index.dim}")
    if queries.n_buckets != index.n_buckets:
        raise DimensionMismatchError(
            f"the queries have {queries.n_buckets} buckets but the index has {index.n_buckets}")
    check_k(k)
    if len(bucket_weights) != index.n_buckets:
        raise UsageError(f"{len(bucket_weights)} bucket weights for {index.n_buckets} buckets")
    if scoring not in SCORINGS:
        raise UsageError(f"scoring={scoring!r}; choose 'binary', 'weighted' or 'quantized'")
    if scoring == "weighted" and index.variant != "weighted":
        raise UsageError("weighted scoring needs a weighted index; build one with WeightedIndex")
    if deleted is not None:
        deleted = np.asarray(deleted)
        n_numbers = len(index.doc_ids)  # a segmented index numbers its deleted documents too
        if deleted.dtype != np.bool_ or deleted.shape != (n_numbers,):
            raise UsageError(f"deleted must be a ({n_numbers},) bool mask over doc numbers, got {deleted.shape} "
                             f"{deleted.dtype}")
    if n_threads is not None and (not isinstance(n_threads, (int, np.integer)) or n_threads < 1):
        raise UsageError(f"n_threads={n_threads!r} must be a positive integer or None")
    check_length_norm(length_norm, scoring)


MAX_LENGTH_NORM = 2.0  # beyond it the shortest matching document wins whatever it shares


def check_length_norm(length_norm, scoring) -> None:
    """length_norm: the exponent alpha of binary scores' n_d ** -alpha factor (0: off); counts only, not weighted."""
    if isinstance(length_norm, bool) or not isinstance(length_norm, (int, float, np.floating, np.integer)) or not (
            0.0 <= float(length_norm) <= MAX_LENGTH_NORM):
        raise UsageError(f"length_norm={length_norm!r} must be a number in [0, {MAX_LENGTH_NORM:g}] (0: off)")
    if length_norm and scoring == "weighted":
        raise UsageError("length_norm divides binary or quantized counts by the document's active dims; weighted "
                         "scoring already uses L2-normalized vectors: pass length_norm=0")


def check_overlap_args(index, query, numbers) -> None:
    """The argument checks of every `overlap_counts` (InvertedIndex and SegmentedIndex)."""
    if not isinstance(query, SparseEncoding):
        raise TypeError(f"query must be a SparseEncoding, got {type(query).__name__}")
    if query.dim != index.dim or query.n_buckets != index.n_buckets:
        raise DimensionMismatchError(f"the query has dim={query.dim} and {query.n_buckets} buckets; the index has "
                                     f"dim={index.dim} and {index.n_buckets}")
    if query.n != 1:
        raise DimensionMismatchError(f"overlap_counts scores one query row, got {query.n}")
    numbers = np.asarray(numbers)
    if numbers.ndim != 1 or (numbers.size and not np.issubdtype(numbers.dtype, np.integer)):
        raise UsageError(f"numbers must be a 1-D array of doc numbers, got {numbers.shape} {numbers.dtype}")
    if numbers.size and (numbers.min() < 0 or numbers.max() >= len(index.doc_ids)):
        raise UsageError(f"doc numbers must lie in [0, {len(index.doc_ids)}), got {int(numbers.min())}.."
                         f"{int(numbers.max())}")


def check_documents(index: SearchableIndex, documents: tuple[int, int] | None) -> None:
    """`search_encoded`'s `documents`: None, or doc numbers (lo, hi), 0 <= lo < hi <= the count of doc numbers
    (a segmented index numbers its deleted documents too), lo a multiple of 64."""
    if documents is not None and not (0 <= documents[0] < documents[1] <= len(index.doc_ids)
                                      and documents[0] % 64 == 0):
        raise ValueError(f"documents={documents}: give (lo, hi) with 0 <= lo < hi <= {len(index.doc_ids)}, "
                         "lo a multiple of 64")
