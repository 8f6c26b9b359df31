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

from uhdsearch.errors import UsageError
from uhdsearch.index.base import check_length_norm
from uhdsearch.search.stopdims import AUTO
LENGTH_NORM = 0.3  # alpha chosen on SciFact train (benchmarks/length_norm.py)


def resolve_length_norm(length_norm, kernel_scoring: str, index, bucket_predictor) -> float:
    """The alpha a Searcher passes to search_encoded: "auto" -> LENGTH_NORM for plain binary scoring on an index
    that supports it, else 0; None -> 0; a number is checked and kept.

    Example:
        >>> resolve_length_norm("auto", "binary", object(), None), resolve_length_norm("auto", "weighted", object(), None)
        (0.3, 0.0)
    """
    supported = getattr(index, "length_norm_supported", True)
    if isinstance(length_norm, str):
        if length_norm != AUTO:
            raise UsageError(f"length_norm={length_norm!r}; give a number in [0, 2], None, or 'auto'")
        return LENGTH_NORM if (kernel_scoring == "binary" and supported and bucket_predictor is None) else 0.0
    if length_norm is None:
        return 0.0
    if length_norm and not supported:
        raise UsageError(f"{type(index).__name__} does not support length_norm (its dims are not the documents' "
                         "active dims); pass length_norm=None")
    check_length_norm(length_norm, kernel_scoring)
    if length_norm and bucket_predictor is not None:
        raise UsageError("a bucket predictor was fitted on plain counts; it cannot be combined with length_norm")
    return float(length_norm)


def parse_length_norm(text: str) -> float | str | None:
    """--length-norm: "auto", "none", or ALPHA.

    Example:
        >>> parse_length_norm("auto"), parse_length_norm("none"), parse_length_norm("0.5")
        ('auto', None, 0.5)
    """
    word = text.strip().lower()
    if word in (AUTO, "none"):
        return None if word == "none" else AUTO
    try:
        value = float(word)
    except ValueError:
        raise UsageError(f"--length-norm {text!r}: give 'auto', 'none' or a number in [0, 2], e.g. 0.4") from None
    try:
        check_length_norm(value, "binary")
    except UsageError as exc:
        raise UsageError(f"--length-norm {text!r}: {exc}") from None
    return value
