"""Load-time checks of one bucket's arrays: everything the kernels index with is checked against the manifest.

The manifest's checksums catch torn or altered files, not a well-formed file with wrong contents (a buggy or
foreign writer, or checksums re-computed over damage). The kernels (kernels/) read without bounds checks, so an
offset, length, row number, first document or padding bit they trust is checked here, once, vectorized: O(dim +
blocks + bitmap rows), never a pass over the postings. What these checks cannot see cheaply (the numbers inside
a packed block, a bitmap's bit count against its posting count, padding bits of a memory-mapped index) the kernels
bound or mask where they read it.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from uhdsearch.errors import IndexFormatError
from uhdsearch.index.codec import BLOCK, n_words
from uhdsearch.index.kernels.validation import blocks_are_valid

DTYPES = {"indptr": np.int64, "bitmap_rows": np.int32, "bitmaps": np.uint64, "block_ptr": np.int64,
          "payload_ptr": np.int64, "blocks": np.uint32, "payload": np.uint32, "weights": np.float32}
Bad = Callable[[str, str], IndexFormatError]


def check_bucket(arrays: dict[str, np.ndarray], dim: int, n_documents: int, bad: Bad, padding: bool = True) -> None:
    """Raise bad(array name, what is wrong) unless the arrays are a valid bucket (codec.py's layout).

    padding: also check that no bitmap sets a bit past the last document. It reads one word per bitmap row: a page
    fault each when memory-mapped (~0.13 s of CPU for 31k rows at 1M documents on a busy machine, twice the rest
    of the load, benchmarks/speed/index_load.py), so a memory-mapped load leaves it to the kernels, which mask those
    bits.
    """
    words = n_words(n_documents)
    for name, array in arrays.items():
        if array.ndim != 1 or array.dtype != DTYPES[name]:
            raise bad(name, f"should be 1-D {np.dtype(DTYPES[name])}, got {array.shape} {array.dtype}")
    indptr, rows = arrays["indptr"], arrays["bitmap_rows"]
    block_ptr, payload_ptr = arrays["block_ptr"], arrays["payload_ptr"]
    for name in ("indptr", "block_ptr", "payload_ptr"):
        a = arrays[name]
        if a.shape[0] != dim + 1 or a[0] != 0 or np.any(np.diff(a) < 0):
            raise bad(name, f"is not a valid postings offset array of {dim + 1} entries "
                            "(must start at 0 and never decrease)")
    df = np.diff(indptr)
    if rows.shape[0] != dim:
        raise bad("bitmap_rows", f"has {rows.shape[0]} entries for dim={dim}")
    if np.any(df > n_documents):
        raise bad("indptr", f"gives a dim more postings than the index's {n_documents} documents")
    is_bitmap = rows >= 0
    n_bitmaps = int(is_bitmap.sum())
    if n_bitmaps and not np.array_equal(np.sort(rows[is_bitmap]), np.arange(n_bitmaps)):
        raise bad("bitmap_rows", "does not number its bitmaps 0..n-1")
    bitmaps = arrays["bitmaps"]
    if bitmaps.shape[0] != n_bitmaps * words:
        raise bad("bitmaps", f"has {bitmaps.shape[0]} words, {n_bitmaps} bitmaps need {n_bitmaps * words}")
    if padding and n_bitmaps and n_documents % 64:
        last_words = bitmaps[words - 1::words]  # one word per row: a page each, even memory-mapped
        if np.any(last_words >> np.uint64(n_documents % 64)):
            raise bad("bitmaps", f"sets bits past the last document ({n_documents}) in a bitmap's padding")
    expected_blocks = np.where(is_bitmap, 0, (df + BLOCK - 1) // BLOCK)
    if not np.array_equal(np.diff(block_ptr), expected_blocks) or np.any(np.diff(payload_ptr)[is_bitmap]):
        raise bad("block_ptr", "disagrees with the posting counts in indptr")
    if arrays["blocks"].shape[0] != 2 * block_ptr[-1]:
        raise bad("blocks", f"has {arrays['blocks'].shape[0]} entries, block_ptr implies {2 * block_ptr[-1]}")
    if arrays["payload"].shape[0] != payload_ptr[-1] + 1:
        raise bad("payload", f"has {arrays['payload'].shape[0]} words, payload_ptr implies {payload_ptr[-1] + 1}")
    if not blocks_are_valid(indptr, block_ptr, payload_ptr, arrays["blocks"], n_documents):
        raise bad("blocks", "points outside its payload, names documents outside the index, or its blocks' first "
                            "documents do not ascend")
    weights = arrays.get("weights")
    if weights is not None and weights.shape[0] != indptr[-1]:
        raise bad("weights", f"has {weights.shape[0]} values for {int(indptr[-1])} postings")
