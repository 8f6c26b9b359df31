"""numba search kernels over compressed postings (see codec.py): exact top-k, many queries and threads.

Work unit: one query over one range of doc numbers, walked in chunks of CHUNK documents. Per chunk and bucket,
packed lists add into small counters (term at a time); bitmap dims of a binary query are counted with
bit-sliced counters (bit j of 64 documents' counts in one word, fed by 15-input carry-save adders, stored plane
by plane so that the loops vectorize), so a bitmap word costs about one SIMD lane-operation per 64 documents and
the scan runs at memory bandwidth. Only documents that can still enter the top k are unpacked: a vectorized
comparator finds them when one bucket scores the query, a per-word bound otherwise. Scores are summed over
buckets in bucket order, as the oracle sums them. Each work unit keeps a k-heap; dispatch.py runs work units on
threads and merges the heaps of one query's ranges.

Integer query weights (quantized IDF) enter the same counter as bit-planes: a dim of weight v adds its bitmap at
every set bit of v (levels.py; a binary query is the case v = 1).

One algorithm per module: bits (intrinsics), heap (the top-k heap and the heap merge: the tie rule), forward and
probe (counts of a few given documents: doc-major rows, or bit tests and block seeks), bitmaps (bit-sliced planes
and the weighted bitmap walk), levels (the adder trees that fill the planes), lists (packed lists), comparator
(sole-bucket candidates), ranges (the range driver and task loop), validation (load-time block check); dispatch is
the host side (threads, query arrays).
"""
