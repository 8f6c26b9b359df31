"""Compressed postings: each dimension is a dense bitmap or delta + bit-packed blocks, whichever is smaller.

Layout of one bucket (all arrays 1-D so that they stream into .npy files):
- `indptr` (dim + 1,) int64: cumulative posting counts; a dim's weights are weights[indptr[d]:indptr[d + 1]].
- `bitmap_rows` (dim,) int32: row of dim d in `bitmaps`, or -1 when d is stored as a packed list.
- `bitmaps` (n_bitmaps * n_words,) uint64: bit i of word w of a row = document 64 w + i is active.
- `block_ptr`, `payload_ptr` (dim + 1,) int64: a list dim's blocks and its first payload word.
- `blocks` (2 n_blocks,) uint32: per block of up to BLOCK postings, its first doc number, then
  (word offset from the dim's payload start) << 5 | bit width.
- `payload` (payload_ptr[-1] + 1,) uint32: gaps minus one of a block's later postings, bit-packed
  LSB first, each block starting on a word; one trailing zero word lets decoders read two words at once.
- `weights` (indptr[-1],) float32 or None: posting values in doc order (bitmaps too), weighted index only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

BLOCK = 128  # postings per packed block: small enough to seek by first doc, large enough to amortise its 8 bytes
DEFAULT_BITMAP_BIAS = 8.0  # bitmap when its bytes <= 8 x the packed list's: ~1.05 B/posting, 4-10x faster than 1.0


@dataclass
class CompressedPostings:
    """One bucket's postings in the layout above (see the module docstring)."""

    indptr: np.ndarray
    bitmap_rows: np.ndarray
    bitmaps: np.ndarray
    block_ptr: np.ndarray
    payload_ptr: np.ndarray
    blocks: np.ndarray
    payload: np.ndarray
    weights: np.ndarray | None

    ARRAYS = ("indptr", "bitmap_rows", "bitmaps", "block_ptr", "payload_ptr", "blocks", "payload")

    @property
    def n_postings(self) -> int:
        return int(self.indptr[-1])

    @property
    def nbytes(self) -> int:
        arrays = [getattr(self, name) for name in self.ARRAYS] + ([self.weights] if self.weights is not None else [])
        return int(sum(a.nbytes for a in arrays))

    def n_bitmaps(self) -> int:
        return int(np.count_nonzero(np.asarray(self.bitmap_rows) >= 0))


def n_words(n_documents: int) -> int:
    return (n_documents + 63) // 64


def compress_range(indptr: np.ndarray, docs: np.ndarray, n_documents: int, bitmap_bias: float = DEFAULT_BITMAP_BIAS):
    """Compress the postings of consecutive dims (CSC `indptr`, `docs` ascending per dim).

    Returns:
        is_bitmap (n_dims,) bool, bitmaps (n_bitmaps * n_words,) uint64, n_blocks (n_dims,) int64,
        n_payload_words (n_dims,) int64, blocks (2 sum(n_blocks),) uint32, payload (sum(n_payload_words),) uint32.
    """
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    docs = np.ascontiguousarray(docs, dtype=np.int32)
    words = n_words(n_documents)
    is_bitmap, n_blocks, n_payload = _plan(indptr, docs, words, float(bitmap_bias))
    bitmaps = np.zeros(int(is_bitmap.sum()) * words, np.uint64)
    blocks = np.zeros(2 * int(n_blocks.sum()), np.uint32)
    payload = np.zeros(int(n_payload.sum()), np.uint32)
    _fill(indptr, docs, words, is_bitmap, n_blocks, n_payload, bitmaps, blocks, payload)
    return is_bitmap, bitmaps, n_blocks, n_payload, blocks, payload


def compress(indptr: np.ndarray, docs: np.ndarray, weights: np.ndarray | None, n_documents: int,
             bitmap_bias: float = DEFAULT_BITMAP_BIAS) -> CompressedPostings:
    """Compress a whole bucket given in CSC form."""
    is_bitmap, bitmaps, n_blocks, n_payload, blocks, payload = compress_range(indptr, docs, n_documents, bitmap_bias)
    rows = np.full(is_bitmap.shape[0], -1, np.int32)
    rows[is_bitmap] = np.arange(int(is_bitmap.sum()), dtype=np.int32)
    return CompressedPostings(
        indptr=np.asarray(indptr, np.int64).copy(),
        bitmap_rows=rows,
        bitmaps=bitmaps,
        block_ptr=np.concatenate(([0], np.cumsum(n_blocks))).astype(np.int64),
        payload_ptr=np.concatenate(([0], np.cumsum(n_payload))).astype(np.int64),
        blocks=blocks,
        payload=np.concatenate((payload, np.zeros(1, np.uint32))),
        weights=None if weights is None else np.asarray(weights, np.float32).copy(),
    )


def decompress(postings: CompressedPostings, n_documents: int) -> np.ndarray:
    """(n_postings,) int32 doc numbers in CSC order: the inverse of `compress` (indptr is postings.indptr).

    Raises:
        ValueError: a bitmap whose bits disagree with its posting count, or a number outside the index (a damaged
            file that load's O(dim + blocks) checks cannot see; the index's loader names the file).
    """
    docs = np.empty(postings.n_postings, np.int32)
    if not _decode_all(postings.indptr, postings.bitmap_rows, postings.bitmaps, n_words(n_documents),
                       postings.block_ptr, postings.payload_ptr, postings.blocks, postings.payload, docs, n_documents):
        raise ValueError("its postings disagree with their counts or name documents outside the index")
    return docs


@numba.njit(cache=True)
def _bit_length(x):
    n = 0
    while x > 0:
        x >>= 1
        n += 1
    return n


@numba.njit(cache=True)
def _plan(indptr, docs, words, bias):
    n_dims = indptr.shape[0] - 1
    is_bitmap = np.zeros(n_dims, np.bool_)
    n_blocks = np.zeros(n_dims, np.int64)
    n_payload = np.zeros(n_dims, np.int64)
    for d in range(n_dims):
        lo, hi = indptr[d], indptr[d + 1]
        if hi == lo:
            continue
        blocks = 0
        payload = 0
        for start in range(lo, hi, BLOCK):
            end = min(start + BLOCK, hi)
            largest = 0
            for i in range(start + 1, end):
                gap = docs[i] - docs[i - 1] - 1
                if gap > largest:
                    largest = gap
            payload += (_bit_length(largest) * (end - start - 1) + 31) // 32
            blocks += 1
        if words * 8 <= bias * (payload * 4 + blocks * 8):
            is_bitmap[d] = True
        else:
            n_blocks[d] = blocks
            n_payload[d] = payload
    return is_bitmap, n_blocks, n_payload


@numba.njit(cache=True)
def _fill(indptr, docs, words, is_bitmap, n_blocks, n_payload, bitmaps, blocks, payload):
    row = 0
    block = 0
    base = 0
    for d in range(indptr.shape[0] - 1):
        lo, hi = indptr[d], indptr[d + 1]
        if is_bitmap[d]:
            offset = row * words
            for i in range(lo, hi):
                doc = docs[i]
                bitmaps[offset + (doc >> 6)] |= np.uint64(1) << np.uint64(doc & 63)
            row += 1
            continue
        relative = 0
        for start in range(lo, hi, BLOCK):
            end = min(start + BLOCK, hi)
            largest = 0
            for i in range(start + 1, end):
                gap = docs[i] - docs[i - 1] - 1
                if gap > largest:
                    largest = gap
            bits = _bit_length(largest)
            blocks[2 * block] = np.uint32(docs[start])
            blocks[2 * block + 1] = np.uint32((relative << 5) | bits)
            position = 0
            for i in range(start + 1, end):
                gap = np.uint64(docs[i] - docs[i - 1] - 1)
                word = base + relative + (position >> 5)
                shift = np.uint64(position & 31)
                payload[word] |= np.uint32((gap << shift) & np.uint64(0xFFFFFFFF))
                if (position & 31) + bits > 32:
                    payload[word + 1] |= np.uint32(gap >> (np.uint64(32) - shift))
                position += bits
            relative += (bits * (end - start - 1) + 31) // 32
            block += 1
        base += n_payload[d]


@numba.njit(cache=True)
def decode_block(blocks, payload, payload_start, block, count, out, at):
    """Write the `count` doc numbers of packed block `block` (of a dim whose payload starts at word
    `payload_start`) to out[at:at + count]."""
    doc = np.int64(blocks[2 * block])
    meta = np.int64(blocks[2 * block + 1])
    bits = meta & 31
    start = payload_start + (meta >> 5)
    mask = (np.uint64(1) << np.uint64(bits)) - np.uint64(1)
    out[at] = doc
    for j in range(1, count):
        position = (j - 1) * bits
        word = start + (position >> 5)
        pair = np.uint64(payload[word]) | (np.uint64(payload[word + 1]) << np.uint64(32))
        doc += np.int64((pair >> np.uint64(position & 31)) & mask) + 1
        out[at + j] = doc


@numba.njit(cache=True)
def _decode_all(indptr, bitmap_rows, bitmaps, words, block_ptr, payload_ptr, blocks, payload, docs, n_documents):
    """Fill `docs`; False (writing nothing outside `docs`) when a bitmap's bits are not its posting count or a
    number is outside 0..n_documents-1."""
    valid = True
    for d in range(indptr.shape[0] - 1):
        out = indptr[d]
        end = indptr[d + 1]
        row = bitmap_rows[d]
        if row >= 0:
            for w in range(words):
                x = bitmaps[row * words + w]
                for bit in range(64):
                    if (x >> np.uint64(bit)) & np.uint64(1):
                        if out >= end or w * 64 + bit >= n_documents:
                            return False
                        docs[out] = w * 64 + bit
                        out += 1
            if out != end:
                valid = False
            continue
        remaining = end - out
        for block in range(block_ptr[d], block_ptr[d + 1]):
            count = min(BLOCK, remaining)
            remaining -= count
            decode_block(blocks, payload, payload_ptr[d], block, count, docs, out)
            for i in range(out, out + count):
                if docs[i] < 0 or docs[i] >= n_documents:
                    valid = False
            out += count
    return valid
