"""Two-pass binary search: the rare query dims choose candidates, the frequent ones are counted for those alone.

A 1M-document search reads every kept query dim's bitmap in full, and the frequent dims (active in 10-30 % of the
documents) are most of those bytes. The first pass scores only the dims active in at most `first_max_df` of the
documents and keeps its top `depth`; the second adds, for those candidates only, the dims it left out
(index.overlap_counts: by default from doc-major rows of the frequent dims that the index builds in memory on
first use, index/forward.py; else a bit test or a block seek per candidate and dim). The result is the exact top-k
*among the candidates*; a document none of whose rare dims match the query is never a candidate. Queries whose first
pass finds fewer than k documents are searched exactly.

How the defaults were chosen, and what the cascade costs in quality and saves in time, is in
benchmarks/experiments/cascade.py (train queries; the README's "Stop dimensions and the cascade").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from uhdsearch.errors import UsageError
from uhdsearch.search.stopdims import mask_entries
from uhdsearch.sparse import SparseEncoding
from uhdsearch.topk import tie_order

FIRST_MAX_DF = 0.1
DEPTH = 100
# "auto" with length-normalized scores: 0.1:100 lost 0.0016 on SciFact train alone; 0.1:300 and 0.2:100 keep exact's
# train score, and 0.1:300 is the faster since lists count into the planes (session 15,
# benchmarks/experiments/cascade.py)
NORMALIZED = (0.1, 300)
MIN_DOCUMENTS = 100_000  # "auto" turns the cascade on from here; below it a search reads little anyway
# query rows an index answers by probing before it builds its doc-major rows: at 1M documents they save ~1 ms a
# query and cost 5-7 s, so a one-off search never pays for them (a service builds them at warm-up)
FORWARD_AFTER = 5_000


@dataclass(frozen=True)
class Cascade:
    """first_max_df: the first pass keeps query dims active in at most this fraction of the documents.
    depth: candidates the first pass hands to the second (at least k are taken).
    forward: the second pass reads doc-major rows of the frequent dims (index.keep_forward: built in memory once
        FORWARD_AFTER query rows have been searched, or at a service's warm-up; 5-7 s and ~1.9 KB per document at
        1M documents; the second pass ~15x faster at depth 300, the whole search 3.2 -> 1.9 ms); False probes the
        postings instead (no memory, the same counts).

    Examples:
        >>> Cascade(0.05, 200)
        Cascade(first_max_df=0.05, depth=200, forward=True)
        >>> Cascade(0, 10)
        Traceback (most recent call last):
        uhdsearch.errors.UsageError: cascade first_max_df=0 must be a fraction of the documents in (0, 1]
    """

    first_max_df: float = FIRST_MAX_DF
    depth: int = DEPTH
    forward: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.first_max_df, (int, float)) and 0 < self.first_max_df <= 1):
            raise UsageError(f"cascade first_max_df={self.first_max_df!r} must be a fraction of the documents in (0, 1]")
        if not isinstance(self.depth, (int, np.integer)) or isinstance(self.depth, bool) or self.depth < 1:
            raise UsageError(f"cascade depth={self.depth!r} must be a positive integer")
        if not isinstance(self.forward, bool):
            raise UsageError(f"cascade forward={self.forward!r} must be True or False")


def split_by_frequency(queries: SparseEncoding, document_frequencies, limit: float) -> tuple[SparseEncoding,
                                                                                           SparseEncoding]:
    """(rare, frequent): the query dims active in at most `limit` documents, and the rest."""
    rare, frequent = [], []
    for m, df in zip(queries.buckets, document_frequencies):
        is_rare = np.asarray(df)[m.indices] <= limit
        rare.append(mask_entries(m, is_rare))
        frequent.append(mask_entries(m, ~is_rare))
    # masking keeps a canonical CSR canonical: the constructor's copies and checks cost more than the masks
    return SparseEncoding.of_canonical(rare, queries.truncated), SparseEncoding.of_canonical(frequent,
                                                                                            queries.truncated)


def cascade_search(index, queries: SparseEncoding, document_frequencies, k: int, bucket_weights, scoring: str,
                   cascade: Cascade, n_threads: int | None = None,
                   length_norm: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """search_encoded's contract (numbers, scores padded with -1 and 0), by the two passes above.

    scoring: "binary", or "quantized" (integer query weights).
    n_threads: the first pass's (search_encoded's).
    length_norm: both passes divide each bucket's count by the document's active dims ** length_norm.
    """
    n_documents = index.n_documents
    depth = min(k, n_documents)
    rare, frequent = split_by_frequency(queries, document_frequencies, cascade.first_max_df * n_documents)
    numbers, scores = index.search_encoded(rare, max(k, cascade.depth), bucket_weights, scoring, n_threads=n_threads,
                                           length_norm=length_norm)
    if cascade.forward:  # a segmented index keeps no rows: it probes its parts
        index.keep_forward(cascade.first_max_df, queries.n, FORWARD_AFTER)
    scales = index.length_scales(length_norm) if length_norm else None
    out_numbers = np.full((queries.n, depth), -1, np.int64)
    out_scores = np.zeros((queries.n, depth))
    exact_rows = []
    # One bucket weighted 1: the first pass's score is the exact integer count of the rare dims (times the
    # document's length factor, which divides out exactly), so adding the frequent counts gives the exact full
    # score; otherwise the float sums are redone over all dims, bucket by bucket in bucket order, as the kernels
    # sum them.
    additive = len(bucket_weights) == 1 and float(bucket_weights[0]) == 1.0
    quantized = scoring == "quantized"
    for row in range(queries.n):
        found = numbers[row] >= 0
        candidates = numbers[row, found]
        if candidates.shape[0] < depth:
            exact_rows.append(row)
            continue
        if additive:
            one = frequent if queries.n == 1 else frequent[row:row + 1]  # a CSR slice costs ~30 us
            first = scores[row, found]
            if scales is None:
                total = first + index.overlap_counts(one, candidates, quantized)[0]
            else:  # the first pass's integer counts back from (1.0 x count) x scale (exact), then rescaled
                factor = scales[0][0][candidates]
                total = (1.0 * (np.rint(first / factor) + index.overlap_counts(one, candidates, quantized)[0])) * factor
        else:
            counts = index.overlap_counts(queries if queries.n == 1 else queries[row:row + 1], candidates, quantized)
            total = np.zeros(candidates.shape[0])
            for b, (weight, count) in enumerate(zip(bucket_weights, counts)):
                if scales is None:
                    total += float(weight) * count
                else:  # the kernels' order: (weight x count) x the document's scale
                    total += (float(weight) * count) * scales[b][0][candidates]
        top = tie_order(total, candidates)[:depth]
        top = top[total[top] > 0]  # negative bucket weights: exact search returns positive scores only
        out_numbers[row, :top.shape[0]] = candidates[top]
        out_scores[row, :top.shape[0]] = total[top]
    if exact_rows:
        rows = np.array(exact_rows)
        out_numbers[rows], out_scores[rows] = index.search_encoded(queries[rows], k, bucket_weights, scoring,
                                                                   n_threads=n_threads, length_norm=length_norm)
    return out_numbers, out_scores

