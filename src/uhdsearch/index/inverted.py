"""Binarized (and weighted) inverted index: per bucket, postings dim -> ascending internal doc numbers.

Postings are stored compressed (codec.py: bitmaps for frequent dims, bit-packed blocks for the rest) and
searched by the numba kernels in kernels/. numpy/scipy/numba only; never imports torch or the encoder
(an encoder is used duck-typed in `build`).
"""
from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numba
import numpy as np
import scipy.sparse as sp

from uhdsearch.errors import IndexFormatError, UsageError
from uhdsearch.index import format as fmt
from uhdsearch.index.base import (IndexCapabilities, Scoring, check_documents, check_overlap_args,
                                  check_search_args)
from uhdsearch.index.checks import check_bucket
from uhdsearch.index.forward import KeptStores, overlap_counts
from uhdsearch.index.kernels import dispatch
from uhdsearch.index.kernels.lengths import document_lengths, length_scales
from uhdsearch.index.kernels.levels import check_levels
from uhdsearch.index.codec import DEFAULT_BITMAP_BIAS, CompressedPostings, compress, decompress, n_words
from uhdsearch.io import (atomic_directory, load_npy, now_or_in_background, prefault_all, recover_directory, save_npy,
                          write_json)
from uhdsearch.sparse import SparseEncoding
from uhdsearch.types import Document

logger = logging.getLogger(__name__)

MAX_KEPT_SCALES = 4  # length-normalization arrays kept per index, one set per alpha (~9 bytes per document)
KEPT_META = ("impact_planes",)  # manifest keys of layers built on a binary index (index/impacts.py), kept on save


@dataclass
class Postings:
    """One bucket's postings in CSC form: docs of dim d are docs[indptr[d]:indptr[d + 1]]."""

    indptr: np.ndarray  # (dim + 1,) int64
    docs: np.ndarray  # (n_postings,) int32, ascending within each dim
    weights: np.ndarray | None  # (n_postings,) float32, or None for a binary index


class InvertedIndex(IndexCapabilities):
    """Base for BinaryIndex and WeightedIndex; `variant` says whether posting weights are stored.

    Each bucket is a `CompressedPostings` (bitmaps for frequent dims, bit-packed blocks for the rest).
    """

    variant: ClassVar[fmt.Variant]
    answers_overlap_counts = True
    searches_document_ranges = True
    has_document_vectors = True

    def __init__(self, buckets: list[CompressedPostings], doc_ids: list[str], dim: int, meta: dict[str, Any],
                 path: Path | None):
        self.buckets = buckets
        self.doc_ids = doc_ids
        self.dim = dim
        self.meta = meta
        self.path = path
        self._postings: list[Postings] | None = None
        self._lengths: list[np.ndarray | None] = [None] * len(buckets)
        self._scales: dict[float, list[tuple[np.ndarray, ...]]] = {}
        self._forward = KeptStores(len(buckets))

    # ------------------------------------------------------------------ facts
    @property
    def n_documents(self) -> int:
        return len(self.doc_ids)

    @property
    def n_buckets(self) -> int:
        return len(self.buckets)

    @property
    def encoder_digest(self) -> str | None:
        return self.meta.get("encoder_digest")

    @property
    def postings(self) -> list[Postings]:
        """Decompressed postings per bucket (decoded on first use and kept; meant for small indexes and tests)."""
        if self._postings is None:
            self._postings = [Postings(np.asarray(c.indptr), self._decompress(b),
                                       None if c.weights is None else np.asarray(c.weights))
                              for b, c in enumerate(self.buckets)]
        return self._postings

    def _decompress(self, bucket: int) -> np.ndarray:
        try:
            return decompress(self.buckets[bucket], self.n_documents)
        except ValueError as exc:
            where = self.path / f"bucket_{bucket}.*.npy" if self.path is not None else f"bucket {bucket}"
            raise IndexFormatError(f"{where}: {exc}; the index is corrupted") from None

    def n_postings(self) -> int:
        return int(sum(c.n_postings for c in self.buckets))

    def nbytes(self) -> int:
        """Bytes of all posting arrays (bitmaps, packed lists, offsets, weights), as stored on disk."""
        return int(sum(c.nbytes for c in self.buckets))

    def warm_up(self, background: bool = False) -> threading.Thread | None:
        """Fault a memory-mapped index's pages into the process now rather than during the first searches.

        The first queries on a freshly opened 1M-document index otherwise spend most of their time mapping pages
        (benchmarks/speed/search_speed.py: p95 140 ms against a 14 ms p50). Reads the whole index once (from the page
        cache, or from disk if it is not cached); a no-op for an index held in memory.

        Also counts the documents' lengths (`document_lengths`), which length-normalized search needs first.

        Args:
            background: return at once and warm in a daemon thread (returned; join it to wait). Searches may
                run meanwhile; they see the same data either way.
        """
        return now_or_in_background(self._warm, background)

    def _warm(self) -> None:
        prefault_all(self.arrays())
        for b in range(self.n_buckets):
            self.document_lengths(b)

    def arrays(self) -> list[np.ndarray]:
        """Every posting array of every bucket (memory-mapped when the index was opened so)."""
        return [a for c in self.buckets for a in (*(getattr(c, n) for n in c.ARRAYS), c.weights) if a is not None]

    def bytes_per_document(self) -> float:
        return self.nbytes() / max(1, self.n_documents)

    def bytes_per_posting(self, include_weights: bool = False) -> float:
        """Index bytes per posting; weights (4 bytes each in a weighted index) only when asked."""
        size = self.nbytes()
        if not include_weights:
            size -= sum(c.weights.nbytes for c in self.buckets if c.weights is not None)
        return size / max(1, self.n_postings())

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(n_documents={self.n_documents}, dim={self.dim}, "
                f"n_buckets={self.n_buckets}, n_postings={self.n_postings()})")

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        encoder,
        corpus: Mapping[str, Document] | Sequence[Document],
        path: str | os.PathLike,
        batch_size: int = 32,
        overwrite: bool = False,
        show_progress: bool = True,
    ) -> InvertedIndex:
        """Encode `corpus` with `encoder` (anything with encode_document and digest) and write the index.

        Example (a word-presence encoder stands in for a UHDEncoder):
            >>> import tempfile
            >>> from uhdsearch.types import Document
            >>> class WordEncoder:
            ...     words = ("cats", "purr", "dogs", "bark")
            ...     def encode_document(self, texts, batch_size=32, show_progress=False):
            ...         rows = [[float(w in t.split()) for w in self.words] for t in texts]
            ...         return SparseEncoding([sp.csr_matrix(np.array(rows, np.float32))])
            ...     def digest(self):
            ...         return "words-v1"
            >>> tmp = tempfile.TemporaryDirectory()
            >>> corpus = [Document("d1", "cats purr"), Document("d2", "dogs bark")]
            >>> index = BinaryIndex.build(WordEncoder(), corpus, f"{tmp.name}/idx", show_progress=False)
            >>> loaded = InvertedIndex.load(f"{tmp.name}/idx")
            >>> type(loaded).__name__, loaded.doc_ids, loaded.encoder_digest
            ('BinaryIndex', ['d1', 'd2'], 'words-v1')
            >>> tmp.cleanup()
        """
        encoding, doc_ids = encode_corpus(encoder, corpus, path, batch_size, overwrite, show_progress)
        return cls.from_encoding(encoding, doc_ids, path, encoder_digest=encoder.digest(), overwrite=overwrite)

    @classmethod
    def from_encoding(
        cls,
        encoding: SparseEncoding,
        doc_ids: Sequence[str],
        path: str | os.PathLike | None,
        encoder_digest: str | None = None,
        overwrite: bool = False,
        bitmap_bias: float = DEFAULT_BITMAP_BIAS,
    ) -> InvertedIndex:
        """Index already-encoded documents; row i of `encoding` is `doc_ids[i]`. path=None keeps it in memory.

        Args:
            bitmap_bias: a dim is stored as a bitmap when its bitmap takes at most this times the bytes of
                its packed list (1.0: whichever is smaller).
        """
        doc_ids = [str(d) for d in doc_ids]
        if len(doc_ids) != encoding.n:
            raise UsageError(f"{len(doc_ids)} doc_ids for {encoding.n} encoded documents")
        _check_unique(doc_ids)
        buckets = []
        for matrix in encoding.buckets:
            csc = matrix.tocsc()
            csc.sum_duplicates()  # also sorts doc numbers within each dim; the codec relies on it
            buckets.append(read_only(compress(
                csc.indptr.astype(np.int64), csc.indices.astype(np.int32),
                csc.data.astype(np.float32) if cls.variant == "weighted" else None, encoding.n, bitmap_bias)))
        meta = {"format": fmt.FORMAT, "variant": cls.variant, "dim": encoding.dim, "n_buckets": encoding.n_buckets,
                "n_documents": encoding.n, "encoder_digest": encoder_digest, "bitmap_bias": float(bitmap_bias)}
        index = cls(buckets, doc_ids, encoding.dim, meta, None)
        if path is not None:
            index.save(path, overwrite=overwrite)
        return index

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        """Write the index directory atomically (temporary directory, then rename)."""
        with atomic_directory(path, overwrite=overwrite) as tmp:
            if any("\n" in d or "\r" in d for d in self.doc_ids):
                raise UsageError("doc_ids may not contain line breaks")
            (tmp / fmt.DOC_IDS_FILE).write_text("".join(d + "\n" for d in self.doc_ids), encoding="utf-8")
            for b, c in enumerate(self.buckets):
                for name, file in fmt.bucket_files(b, self.variant).items():
                    save_npy(tmp / file, getattr(c, name))
            self.meta = fmt.make_meta(self.variant, self.dim, self.n_buckets, self.n_documents,
                                      self.encoder_digest, tmp, {"bitmap_bias": self.meta.get("bitmap_bias"),
                                      **{k: self.meta[k] for k in KEPT_META if k in self.meta}})
            write_json(tmp / fmt.META_FILE, self.meta)
        self.path = Path(path)

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool | None = None, verify: bool | None = None) -> InvertedIndex:
        """Open an index directory. Any subclass may be asked; the variant on disk decides the class.

        Args:
            mmap: memory-map the arrays instead of reading them (default: when the index is larger than 256 MB);
                the kernels then read postings from the page cache on demand.
            verify: check SHA-256 of every file (default: when the index is at most 128 MB); sizes are always checked.
        Raises:
            FileNotFoundError, IndexFormatError: see `uhdsearch.index.format.read_meta`.
        """
        directory = recover_directory(path)  # a swap cut short by a kill (uhdsearch.io.atomic_directory)
        meta = fmt.read_meta(directory, verify=verify)
        variant = meta["variant"]
        klass = WeightedIndex if variant == "weighted" else BinaryIndex
        if cls is WeightedIndex and klass is not WeightedIndex:
            raise IndexFormatError(f"{directory} is a binary index; WeightedIndex needs posting weights")
        if mmap is None:
            mmap = sum(f["bytes"] for f in meta["files"].values()) > 256 * 1024 * 1024
        doc_ids = fmt.read_doc_ids(directory / fmt.DOC_IDS_FILE, meta["n_documents"])
        buckets = [_load_bucket(directory, b, variant, meta, mmap) for b in range(meta["n_buckets"])]
        return klass(buckets, doc_ids, meta["dim"], meta, directory)

    # ------------------------------------------------------------------ views
    def document_vectors(self) -> SparseEncoding:
        """The indexed vectors back as (n_documents, dim) CSR per bucket (binary: all ones)."""
        out = []
        for p in self.postings:
            data = p.weights if p.weights is not None else np.ones(p.docs.shape[0], np.float32)
            csc = sp.csc_matrix((np.asarray(data), np.asarray(p.docs), np.asarray(p.indptr)),
                                shape=(self.n_documents, self.dim))
            out.append(csc.tocsr())
        return SparseEncoding(out)

    # ------------------------------------------------------------------ search
    def search_encoded(
        self,
        queries: SparseEncoding,
        k: int,
        bucket_weights: Sequence[float],
        scoring: Scoring,
        deleted: np.ndarray | None = None,
        n_threads: int | None = None,
        length_norm: float = 0.0,
        documents: tuple[int, int] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of every query row (Eq. 7 summed over buckets with `bucket_weights`).

        Args:
            queries: encoded queries, one bucket per index bucket, same dim.
            k: result depth, > 0.
            scoring: "binary" counts shared active dims; "weighted" sums query x document values; "quantized"
                sums the query's integer values (1..15, e.g. quantized IDF) of the dims a document shares.
            deleted: optional (n_documents,) bool mask of documents never returned.
            n_threads: threads for the kernels (default: numba's current setting).
            length_norm: alpha > 0 divides each bucket's binary or quantized count by n_d ** alpha, n_d the
                document's active dims in that bucket (`document_lengths`); 0 (the default here): plain counts.
            documents: (lo, hi): search documents lo..hi-1 only, lo a multiple of 64 (/explain scores one
                document dim by dim: each dim then costs a word, not the index).
        Returns:
            numbers (n_queries, min(k, n_documents)) int64 and scores of the same shape float64, sorted by
            score descending then doc number ascending; only positive scores; rows padded with -1 and 0.
        Raises:
            DimensionMismatchError: queries of another dim or bucket count.
            ValueError: bad k, weights, scoring, mask or thread count.
        """
        check_search_args(self, queries, k, bucket_weights, scoring, deleted, n_threads, length_norm)
        if n_threads is None:
            n_threads = numba.get_num_threads()
        if scoring == "quantized":
            check_levels(queries)
        check_documents(self, documents)
        return dispatch.search(self.buckets, self.n_documents, queries, int(k), bucket_weights,
                              scoring == "weighted", deleted, int(n_threads), quantized=scoring == "quantized",
                              scales=self.length_scales(length_norm) if length_norm else None,
                              bounds=None if documents is None else np.array(documents, np.int64))

    def document_lengths(self, bucket: int = 0) -> np.ndarray:
        """(n_documents,) int64 number of active dims of each document in `bucket`; counted from the postings on
        first use (or by `warm_up`) and kept: about 5 s per million documents at the quickstart model's density."""
        if self._lengths[bucket] is None:
            c = self.buckets[bucket]
            lengths = document_lengths(c.indptr, c.bitmap_rows, c.bitmaps, c.block_ptr, c.payload_ptr, c.blocks,
                                       c.payload, n_words(self.n_documents), self.n_documents)
            lengths.setflags(write=False)
            self._lengths[bucket] = lengths
        return self._lengths[bucket]

    def length_scales(self, alpha: float) -> list[tuple[np.ndarray, ...]]:
        """Per bucket, kernels/lengths.py's length_scales arrays (scale n_d ** -alpha per document first), kept
        for the last few alphas."""
        alpha = float(alpha)
        if alpha not in self._scales:
            while len(self._scales) >= MAX_KEPT_SCALES:  # a client may send any alpha: keep the latest few
                self._scales.pop(next(iter(self._scales)))
            self._scales[alpha] = [length_scales(self.document_lengths(b), alpha) for b in range(self.n_buckets)]
        return self._scales[alpha]

    def document_frequencies(self, bucket: int = 0) -> np.ndarray:
        """(dim,) int64 number of documents in which each dimension is active."""
        return np.diff(np.asarray(self.buckets[bucket].indptr))

    def overlap_counts(self, query: SparseEncoding, numbers: np.ndarray, quantized: bool = False) -> np.ndarray:
        """(n_buckets, len(numbers)) int64: per bucket, the active dims that one query row shares with each of the
        given documents (or the sum of the query's integer weights of those dims, when `quantized`).

        Reads only the words of the bitmaps and the blocks of the lists that hold the given documents: the cost
        grows with len(numbers) x the query's dims, not with the index (search/cascade.py's second pass).

        Raises:
            DimensionMismatchError: a query of another dim or bucket count, or more than one row.
            UsageError: a number outside the index.
        """
        check_overlap_args(self, query, numbers)
        if quantized:
            check_levels(query)
        return overlap_counts(self.buckets, self._forward.stores, self.n_documents, query, numbers, quantized)

    def keep_forward(self, max_share: float, n_queries: int = 0, after: int = 0) -> None:
        """Build, in memory and once, the doc-major rows of the bitmap dims active in more than `max_share` of the
        documents (index/forward.py), which `overlap_counts` then reads instead of probing: the cascade's second
        pass. 5-7 s and 1.9 KB per document at 1M. `after`: build only once that many query rows (`n_queries` per
        call) have asked (the cascade's policy). The counts are the same with or without."""
        if not (isinstance(max_share, (int, float)) and 0.0 < max_share <= 1.0):
            raise UsageError(f"max_share={max_share!r} must be a fraction of the documents in (0, 1]")
        self._forward.keep(self.buckets, self.n_documents, int(np.floor(max_share * self.n_documents)), n_queries,
                           after)


class BinaryIndex(InvertedIndex):
    """Postings without weights: scores count shared active dimensions (§3.4, §3.7)."""

    variant = "binary"


class WeightedIndex(InvertedIndex):
    """Postings with the document's bucket values: scores are dot products (Eq. 7)."""

    variant = "weighted"


def encode_corpus(encoder, corpus: Mapping[str, Document] | Sequence[Document], path, batch_size: int,
                  overwrite: bool, show_progress: bool) -> tuple[SparseEncoding, list[str]]:
    """The documents' encoding and ids, after the checks that must not wait for the slow encoding."""
    documents = list(corpus.values()) if isinstance(corpus, Mapping) else list(corpus)
    _check_documents(documents)
    if Path(path).exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True (CLI: --overwrite) to replace it")
    encoding = encoder.encode_document([d.full_text for d in documents], batch_size=batch_size,
                                       show_progress=show_progress)
    return encoding, [d.doc_id for d in documents]


def _load_bucket(directory: Path, bucket: int, variant: str, meta: dict, mmap: bool) -> CompressedPostings:
    """Read one bucket and check shapes, dtypes and offsets: O(dim + blocks), never a pass over postings."""
    files = fmt.bucket_files(bucket, variant)
    arrays = {}
    for name, file in files.items():
        try:
            arrays[name] = np.asarray(load_npy(directory / file, mmap=mmap))
        except ValueError as exc:  # foreign, pickled or truncated .npy
            raise IndexFormatError(f"{directory / file} is not a valid .npy array: {exc}") from exc

    def bad(name: str, why: str) -> IndexFormatError:
        return IndexFormatError(f"{directory / files[name]} {why}; the index is corrupted")

    check_bucket(arrays, meta["dim"], meta["n_documents"], bad, padding=not mmap)
    weights = arrays.get("weights")
    return read_only(CompressedPostings(weights=weights, **{n: arrays[n] for n in fmt.BUCKET_ARRAYS}))


def read_only(postings: CompressedPostings) -> CompressedPostings:
    """`postings` with every array a read-only numpy array, as `load` and `from_encoding` hand them to an index.

    One array type for in-memory and memory-mapped indexes, so the kernels compile once; benchmarks that build a
    bucket with `codec.compress` pass it through here too.
    """
    for name in CompressedPostings.ARRAYS + ("weights",):
        array = getattr(postings, name)
        if array is not None:
            array = np.asarray(array)
            array.setflags(write=False)
            setattr(postings, name, array)
    return postings


def _check_unique(doc_ids: Sequence[str]) -> None:
    fmt.check_doc_ids(doc_ids)


def _check_documents(documents: Sequence[Document]) -> None:
    if not documents:
        raise UsageError("the corpus is empty: nothing to index")
    _check_unique([d.doc_id for d in documents])
    empty = sum(1 for d in documents if not d.full_text.strip())
    if empty:
        warnings.warn(f"{empty} documents have no text; they are indexed but can never match", stacklevel=3)
