"""IndexWriter: stream postings into an index directory, dimension range by dimension range, with bounded memory.

The directory appears atomically on `close()` (temporary directory beside the target, then rename).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.lib import format as npy_format

from uhdsearch.errors import UsageError
from uhdsearch.index import format as fmt
from uhdsearch.index.codec import DEFAULT_BITMAP_BIAS, compress_range
from uhdsearch.io import atomic_directory, save_npy, write_json

NPY_HEADER_BYTES = 128  # np.save's v1.0 header for a 1-D array of any realistic length


class NpyStream:
    """Append-only 1-D .npy file whose header (with the final length) is written on close."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.path = path
        self.dtype = np.dtype(dtype)
        self.length = 0
        self._file: BinaryIO = open(path, "wb")
        self._file.write(b"\0" * NPY_HEADER_BYTES)

    def append(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        self._file.write(memoryview(values).cast("B"))
        self.length += values.shape[0]

    def close(self) -> None:
        header = _npy_header(self.dtype, self.length)
        self._file.seek(0)
        self._file.write(header)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


def _npy_header(dtype: np.dtype, length: int) -> bytes:
    import io

    buffer = io.BytesIO()
    npy_format.write_array_header_1_0(
        buffer, {"descr": npy_format.dtype_to_descr(dtype), "fortran_order": False, "shape": (length,)})
    header = buffer.getvalue()
    if len(header) != NPY_HEADER_BYTES:  # cannot happen for 1-D arrays below 10**60 elements
        raise RuntimeError(f"unexpected .npy header length {len(header)}")
    return header


class IndexWriter:
    """Write an index without holding all postings in memory.

    Call `add_postings` for each bucket with consecutive dimension ranges in ascending order (ranges of
    one bucket must be contiguous and start at 0), then `close()`. Dimensions never given have no postings.
    Each range is compressed as it arrives (codec.py), so memory is bounded by the largest range given.

    Examples:
        >>> import tempfile
        >>> from uhdsearch.index.inverted import InvertedIndex
        >>> tmp = tempfile.TemporaryDirectory()
        >>> ids = ["a", "b", "c"]
        >>> with IndexWriter(f"{tmp.name}/idx", "binary", dim=4, n_buckets=1, n_documents=3, doc_ids=ids) as w:
        ...     w.add_postings(0, 0, np.array([0, 2, 3]), np.array([0, 2, 1], np.int32))  # dim 0: a, c; dim 1: b
        ...     w.add_postings(0, 2, np.array([0, 0, 1]), np.array([2], np.int32))  # dim 2: none; dim 3: c
        >>> index = InvertedIndex.load(f"{tmp.name}/idx")
        >>> index.n_documents, index.document_frequencies().tolist()
        (3, [2, 1, 0, 1])
        >>> tmp.cleanup()
    """

    def __init__(
        self,
        path: str | os.PathLike,
        variant: fmt.Variant,
        dim: int,
        n_buckets: int,
        n_documents: int,
        doc_ids: Sequence[str] | None = None,
        encoder_digest: str | None = None,
        overwrite: bool = False,
        bitmap_bias: float = DEFAULT_BITMAP_BIAS,
    ) -> None:
        if not bitmap_bias > 0:
            raise UsageError(f"bitmap_bias={bitmap_bias!r} must be positive")
        if variant not in fmt.VARIANTS:
            raise UsageError(f"variant={variant!r}; choose one of {fmt.VARIANTS}")
        for name, value in (("dim", dim), ("n_buckets", n_buckets), ("n_documents", n_documents)):
            if not isinstance(value, (int, np.integer)) or value < (0 if name == "n_documents" else 1):
                raise UsageError(f"{name}={value!r} must be a positive integer")
        if n_documents >= 2**31:
            raise UsageError(f"n_documents={n_documents} exceeds the int32 doc numbers of this format")
        doc_ids = [str(i) for i in range(n_documents)] if doc_ids is None else [str(d) for d in doc_ids]
        if len(doc_ids) != n_documents:
            raise UsageError(f"{len(doc_ids)} doc_ids for n_documents={n_documents}")
        if any("\n" in d or "\r" in d for d in doc_ids):
            raise UsageError("doc_ids may not contain line breaks")
        from uhdsearch.index.inverted import _check_unique

        _check_unique(doc_ids)
        self.path = Path(path)
        self.variant = variant
        self.dim, self.n_buckets, self.n_documents = int(dim), int(n_buckets), int(n_documents)
        self.encoder_digest = encoder_digest
        self.bitmap_bias = float(bitmap_bias)
        self._context = atomic_directory(self.path, overwrite=overwrite)
        self._tmp = self._context.__enter__()
        self._closed = False
        (self._tmp / fmt.DOC_IDS_FILE).write_text("".join(d + "\n" for d in doc_ids), encoding="utf-8")
        self._next_dim = [0] * self.n_buckets
        self._n_bitmaps = [0] * self.n_buckets
        self._offsets = [{name: np.zeros(self.dim + 1, np.int64) for name in ("indptr", "block_ptr", "payload_ptr")}
                         for _ in range(self.n_buckets)]
        self._bitmap_rows = [np.full(self.dim, -1, np.int32) for _ in range(self.n_buckets)]
        dtypes = {"bitmaps": np.uint64, "blocks": np.uint32, "payload": np.uint32, "weights": np.float32}
        self._streams: list[dict[str, NpyStream]] = []
        for b in range(self.n_buckets):
            files = fmt.bucket_files(b, variant)
            self._streams.append({name: NpyStream(self._tmp / files[name], dtype)
                                  for name, dtype in dtypes.items() if name in files})

    def add_postings(
        self, bucket: int, first_dim: int, indptr: np.ndarray, docs: np.ndarray, weights: np.ndarray | None = None
    ) -> None:
        """Append the postings of dims first_dim .. first_dim + len(indptr) - 2 of `bucket`.

        Args:
            indptr: (n_dims + 1,) offsets into `docs`, starting at 0 (CSC layout of the range).
            docs: (indptr[-1],) doc numbers, strictly ascending within each dim.
            weights: (indptr[-1],) float32 values; required for a weighted index, ignored for a binary one.
        Raises:
            ValueError: ranges out of order, bad offsets, unsorted or out-of-range doc numbers.
        """
        self._check_open()
        if not 0 <= bucket < self.n_buckets:
            raise UsageError(f"bucket={bucket} is outside 0..{self.n_buckets - 1}")
        if first_dim != self._next_dim[bucket]:
            raise UsageError(f"bucket {bucket}: expected the range starting at dim {self._next_dim[bucket]}, "
                             f"got first_dim={first_dim}; give dimension ranges in order without gaps")
        indptr = np.asarray(indptr, dtype=np.int64)
        docs = np.asarray(docs)
        n_dims = indptr.shape[0] - 1
        if indptr.ndim != 1 or n_dims < 0 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise UsageError("indptr must be 1-D, start at 0 and never decrease")
        if first_dim + n_dims > self.dim:
            raise UsageError(f"dims {first_dim}..{first_dim + n_dims - 1} exceed dim={self.dim}")
        if docs.ndim != 1 or docs.shape[0] != indptr[-1]:
            raise UsageError(f"docs has {docs.shape} entries but indptr ends at {int(indptr[-1])}")
        if docs.shape[0]:
            if int(docs.min()) < 0 or int(docs.max()) >= self.n_documents:
                raise UsageError(f"doc numbers must lie in 0..{self.n_documents - 1}")
            steps = np.diff(docs.astype(np.int64))
            starts = indptr[1:-1]
            steps[starts[(starts > 0) & (starts < docs.shape[0])] - 1] = 1  # dim boundaries may step down
            if np.any(steps <= 0):
                raise UsageError("doc numbers must be strictly ascending within each dim")
        streams = self._streams[bucket]
        if "weights" in streams:
            if weights is None:
                raise UsageError("a weighted index needs posting weights")
            weights = np.asarray(weights, dtype=np.float32)
            if weights.shape != docs.shape:
                raise UsageError(f"weights has shape {weights.shape}, docs {docs.shape}")
        is_bitmap, bitmaps, n_blocks, n_payload, blocks, payload = compress_range(
            indptr, docs, self.n_documents, self.bitmap_bias)
        rows = self._bitmap_rows[bucket][first_dim:first_dim + n_dims]
        rows[is_bitmap] = self._n_bitmaps[bucket] + np.arange(int(is_bitmap.sum()), dtype=np.int32)
        self._n_bitmaps[bucket] += int(is_bitmap.sum())
        for name, counts in (("indptr", np.diff(indptr)), ("block_ptr", n_blocks), ("payload_ptr", n_payload)):
            offsets = self._offsets[bucket][name]
            offsets[first_dim + 1:first_dim + n_dims + 1] = offsets[first_dim] + np.cumsum(counts)
            offsets[first_dim + n_dims + 1:] = offsets[first_dim + n_dims]
        streams["bitmaps"].append(bitmaps)
        streams["blocks"].append(blocks)
        streams["payload"].append(payload)
        if "weights" in streams:
            streams["weights"].append(weights)
        self._next_dim[bucket] = first_dim + n_dims

    def close(self, extra_meta: dict[str, Any] | None = None) -> Path:
        """Finish every file, write the manifest (sizes and SHA-256) and move the directory into place."""
        self._check_open()
        self._closed = True
        try:
            for b in range(self.n_buckets):
                self._streams[b]["payload"].append(np.zeros(1, np.uint32))  # the codec's trailing pad word
                for stream in self._streams[b].values():
                    stream.close()
                files = fmt.bucket_files(b, self.variant)
                for name, offsets in self._offsets[b].items():
                    save_npy(self._tmp / files[name], offsets)
                save_npy(self._tmp / files["bitmap_rows"], self._bitmap_rows[b])
            extra = {"bitmap_bias": self.bitmap_bias, **(extra_meta or {})}
            meta = fmt.make_meta(self.variant, self.dim, self.n_buckets, self.n_documents, self.encoder_digest,
                                 self._tmp, extra)
            write_json(self._tmp / fmt.META_FILE, meta)
        except BaseException as exc:
            self._context.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._context.__exit__(None, None, None)
        return self.path

    def abort(self) -> None:
        """Discard everything written; the target is left as it was."""
        if self._closed:
            return
        self._closed = True
        for streams in self._streams:
            for stream in streams.values():
                stream._file.close()
        error = RuntimeError("index writing aborted")
        try:
            self._context.__exit__(RuntimeError, error, None)
        except RuntimeError:
            pass

    def __enter__(self) -> IndexWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if not self._closed:
                self.close()
        else:
            self.abort()

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"the writer for {self.path} is already closed")
