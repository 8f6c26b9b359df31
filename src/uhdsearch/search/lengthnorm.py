"""Length-normalized binary scores: each bucket's count of shared dims divided by n_d ** alpha.

A document's binary code is the union of its tokens' winners (max-pooling), so a long document is active in more
dims and shares more of them with any query by chance: the plain count prefers long documents, which the paper's
weighted scores escape through the L2 norm. Dividing by n_d ** alpha (n_d: the document's active dims in the
bucket, from the index alone) is BM25's remedy in one number per document, and the index stays binary.

How alpha was chosen: the SciFact train queries on the quickstart model, the corpus alone and with 100,000 short
dictionary definitions mixed in, over alpha in {0, 0.1, ..., 0.6}; the best mean of the two (benchmarks/
length_norm.py; the README's "Length-normalized binary scores"). Larger alphas do better on a corpus of
similar documents and worse when very short documents are mixed in: they lift every short document.
"""
from __future__ import annotations

LENGTH_NORM = 0.3  # alpha chosen on SciFact train (benchmarks/experiments/length_norm.py)


