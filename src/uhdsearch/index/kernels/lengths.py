"""Per-document active-dim counts of a compressed bucket, and the length-normalization scales built on them.

A binary score counts the dims a document shares with the query, so a document with more active dims (a longer
text: max-pooling takes the union of its tokens' winners) shares more by chance. Dividing the count by
n_d ** alpha, n_d the document's active dims in that bucket, takes that advantage away (search/lengthnorm.py).
"""
from __future__ import annotations

import numba
import numpy as np

from uhdsearch.index.codec import BLOCK, decode_block
from uhdsearch.index.kernels.bits import trailing_zeros


@numba.njit(cache=True)
def document_lengths(indptr, rows, bitmaps, block_ptr, payload_ptr, blocks, payload, words, n_documents):
    """(n_documents,) int64: the number of dims each document is active in (its postings in this bucket).

    Bits past the last document and decoded numbers outside the index are not counted: a damaged file must not
    make this write outside `lengths` (load checks them too; this is the last line).
    """
    lengths = np.zeros(n_documents, np.int64)
    buffer = np.empty(BLOCK, np.int64)
    tail = ~np.uint64(0) if n_documents % 64 == 0 else (np.uint64(1) << np.uint64(n_documents % 64)) - np.uint64(1)
    for d in range(indptr.shape[0] - 1):
        r = rows[d]
        if r >= 0:
            base = np.int64(r) * words
            for w in range(words):
                x = bitmaps[base + w]
                if w == words - 1:
                    x &= tail
                while x:
                    lengths[w * 64 + trailing_zeros(x)] += 1
                    x &= x - np.uint64(1)
            continue
        left = indptr[d + 1] - indptr[d]
        for block in range(block_ptr[d], block_ptr[d + 1]):
            size = min(BLOCK, left)
            decode_block(blocks, payload, payload_ptr[d], block, size, buffer, 0)
            for i in range(size):
                if buffer[i] < n_documents:
                    lengths[buffer[i]] += 1
            left -= size
    return lengths


N_CLASSES = 8  # length classes of the comparator: 8 thresholds per chunk instead of one


def length_scales(lengths: np.ndarray, alpha: float) -> tuple[np.ndarray, ...]:
    """(scale, word_max, class_bits, class_max): the kernels' length-normalization arrays.

    scale[d] = max(n_d, 1) ** -alpha (float64; a document with no active dim never matches, so its value does not
    matter); word_max: its maximum over each 64-document word (the general path's bound); class_bits: N_CLASSES
    bitmaps of n_words words, the documents of each scale class (equal-frequency); class_max: each class's largest
    scale. The comparator asks each class for the count its own largest scale needs: one threshold for all
    would be set by the shortest document and let every long document through.
    """
    scale = np.maximum(np.asarray(lengths, np.float64), 1.0) ** -float(alpha)
    n = scale.shape[0]
    words = (n + 63) // 64
    padded = np.zeros(words * 64)
    padded[:n] = scale
    edges = np.quantile(scale, np.linspace(0, 1, N_CLASSES + 1)[1:-1]) if n else np.zeros(N_CLASSES - 1)
    classes = np.searchsorted(edges, scale, side="left")
    class_max = np.zeros(N_CLASSES)
    np.maximum.at(class_max, classes, scale)
    member = np.zeros((N_CLASSES, words * 64), np.bool_)
    member[classes, np.arange(n)] = True
    class_bits = np.packbits(member.reshape(N_CLASSES, words, 8, 8), axis=-1, bitorder="little")
    return scale, padded.reshape(-1, 64).max(axis=1), class_bits.reshape(-1).view(np.uint64), class_max
