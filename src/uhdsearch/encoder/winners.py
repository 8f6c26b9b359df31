"""The WTA head's inference kernels in numba: top-k and max-pool straight to CSR.

The top-k: each row's k largest values, ties broken by the lower dimension (one rule for documents and queries),
over the raw bfloat16 or float32 bits.

torch.topk leaves the order of equal values unspecified, and bfloat16's 8-bit mantissa makes equal values at the
k-th place common; this kernel fixes the rule (value descending, then dimension ascending). It is also cheaper:
a row's 128-wide block maxima bound the k-th value from below, so only the few blocks that can hold a winner are
scanned twice.

Given float32 products and `round_bfloat16`, it chooses among the values rounded to bfloat16 as it reads them
(encoder/precision.py's emulated path): the same winners as on the rounded tensor, without a pass that writes it.
"""
from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
import torch

BLOCK = 128


@numba.njit(cache=True, inline="always")
def _key(bits, top):
    # Float bits as a signed integer that orders like the float: negatives have their magnitude bits flipped;
    # -0.0 (key -1, no other value's) equals +0.0 as floats do.
    key = bits ^ ((bits >> top) & ((1 << top) - 1))
    return 0 if key == -1 else key


@numba.njit(cache=True, inline="always")
def _bits(value, rounding):
    # float32 bits -> the bits of the nearest bfloat16, ties to even (as torch rounds), sign-extended; the map is
    # monotone in the signed-integer order, so the maximum of rounded bits is the rounded maximum.
    if rounding:
        v = np.int64(value)
        return (v + 0x7FFF + ((v >> 16) & 1)) >> 16
    return np.int64(value)


@numba.njit(cache=True)
def _row_winners(row, k, top, out_dims, rounding):
    """Fill out_dims (k,) with the winners of one row of signed-integer float bits, best first.

    rounding: `row` holds float32 bits to be read as the nearest bfloat16 (then `top` is bfloat16's 15)."""
    dim = row.shape[0]
    n_blocks = (dim + BLOCK - 1) // BLOCK
    maxima = np.empty(n_blocks, np.int64)
    for b in range(n_blocks):
        # Raw bits order like floats among non-negative values (the usual winners): a vectorized max.
        maxima[b] = _bits(row[b * BLOCK : min(dim, (b + 1) * BLOCK)].max(), rounding)
    if np.sort(maxima)[max(n_blocks - k, 0)] <= 0:  # fewer than k blocks hold a positive value: exact keys
        for b in range(n_blocks):
            best = _key(_bits(row[b * BLOCK], rounding), top)
            for j in range(b * BLOCK + 1, min(dim, (b + 1) * BLOCK)):
                best = max(best, _key(_bits(row[j], rounding), top))
            maxima[b] = best
    # The k best elements lie in at most k blocks, so the k-th largest element is >= the k-th largest block maximum.
    bound = np.sort(maxima)[n_blocks - k] if n_blocks >= k else -(np.int64(1) << top)
    n = 0
    for b in range(n_blocks):
        if maxima[b] >= bound:
            n += min(dim, (b + 1) * BLOCK) - b * BLOCK
    codes = np.empty(n, np.int64)
    n = 0
    for b in range(n_blocks):
        if maxima[b] >= bound:
            for j in range(b * BLOCK, min(dim, (b + 1) * BLOCK)):
                key = _key(_bits(row[j], rounding), top)
                if key >= bound:
                    # (max key - key, dim) in one integer: ascending order is value desc, then dim asc
                    codes[n] = (((np.int64(1) << top) - 1 - key) << 24) | j
                    n += 1
    codes = np.sort(codes[:n])
    for i in range(k):
        out_dims[i] = codes[i] & 0xFFFFFF


@numba.njit(cache=True, parallel=True)
def _winners(rows, k, top, dims, rounding):
    for i in numba.prange(rows.shape[0]):
        _row_winners(rows[i], k, top, dims[i], rounding)


@numba.njit(cache=True)
def _winners_serial(rows, k, top, dims, rounding):
    for i in range(rows.shape[0]):
        _row_winners(rows[i], k, top, dims[i], rounding)


# Below this many rows (a query's tokens) waking numba's thread pool costs more than it saves.
PARALLEL_ROWS = 256


def top_winners(z: torch.Tensor, k: int, round_bfloat16: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest entries of each row of a contiguous CPU (n, dim) bfloat16 or float32 tensor.

    round_bfloat16: a float32 `z` is read as rounded to bfloat16 (the winners and values of `z.bfloat16()`).

    Returns:
        values (n, k) float32 and dimensions (n, k) int64, best first; equal values by dimension ascending.

    Examples:
        >>> values, dims = top_winners(torch.tensor([[0.5, 2.0, 2.0, -1.0, 2.0]]), 2)
        >>> values.tolist(), dims.tolist()
        ([[2.0, 2.0]], [[1, 2]])
    """
    rounding = round_bfloat16 and z.dtype == torch.float32
    if z.dtype == torch.bfloat16:
        bits, top = z.contiguous().view(torch.int16).numpy(), 15
    elif z.dtype == torch.float32:
        bits, top = z.contiguous().view(torch.int32).numpy(), 15 if rounding else 31
    else:
        raise TypeError(f"top_winners takes bfloat16 or float32 scores, not {z.dtype}")
    if not 0 < k <= bits.shape[1] or bits.shape[1] >= 1 << 24:
        raise ValueError(f"k={k} must be in 1..{bits.shape[1]} (dims below 2**24)")
    dims = np.empty((bits.shape[0], k), np.int64)
    if bits.shape[0]:
        (_winners if bits.shape[0] >= PARALLEL_ROWS else _winners_serial)(bits, k, top, dims, rounding)
    indices = torch.from_numpy(dims)
    values = torch.gather(z, 1, indices)
    return (values.to(torch.bfloat16) if rounding else values).float(), indices


@numba.njit(cache=True)
def _pool(values, dims, token_text, n_texts, dim):
    order = np.argsort(token_text, kind="mergesort")  # tokens grouped by text, stable
    scratch = np.zeros(dim, np.float32)
    touched = np.empty(values.size, np.int64)
    indptr = np.zeros(n_texts + 1, np.int64)
    out_dims = np.empty(values.size, np.int32)
    out_values = np.empty(values.size, np.float32)
    n_out = 0
    t = 0
    for text in range(n_texts):
        n_touched = 0
        while t < order.shape[0] and token_text[order[t]] == text:
            token = order[t]
            for j in range(dims.shape[1]):
                v = values[token, j]
                if v > 0:  # the pool starts from zero: a non-positive winner is no active dim
                    d = dims[token, j]
                    if scratch[d] == 0:
                        touched[n_touched] = d
                        n_touched += 1
                    if v > scratch[d]:
                        scratch[d] = v
            t += 1
        kept = np.sort(touched[:n_touched])
        norm = 0.0
        for d in kept:
            norm += np.float64(scratch[d]) * np.float64(scratch[d])
        scale = np.float32(max(np.sqrt(norm), 1e-12))
        for d in kept:
            out_dims[n_out] = d
            out_values[n_out] = scratch[d] / scale
            scratch[d] = 0
            n_out += 1
        indptr[text + 1] = n_out
    return indptr, out_dims[:n_out].copy(), out_values[:n_out].copy()


def pooled_csr(values: torch.Tensor, dims: torch.Tensor, token_text: torch.Tensor, n_texts: int,
               dim: int) -> sp.csr_matrix:
    """Max-pool of each text's token winners, L2-normalized, as (n_texts, dim) CSR float32 with sorted indices.

    What pooling.max_pool_winners then l2_normalize give, without dense (n_texts, dim) rows (the norm is summed
    in float64, so a value may differ from the dense path's in the last bit).

    Examples:
        >>> m = pooled_csr(torch.tensor([[0.3, 0.0], [0.4, -0.1]]), torch.tensor([[3, 1], [0, 3]]),
        ...                torch.tensor([0, 0]), n_texts=2, dim=4)
        >>> m.indptr.tolist(), m.indices.tolist(), [round(float(v), 3) for v in m.data]
        ([0, 2, 2], [0, 3], [0.8, 0.6])
    """
    indptr, indices, data = _pool(values.numpy(), dims.numpy(), token_text.numpy(), n_texts, dim)
    return sp.csr_matrix((data, indices, indptr), shape=(n_texts, dim))
