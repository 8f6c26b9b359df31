"""search_encoded(..., documents=(lo, hi)): the same top k as the whole index with everything outside masked."""
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.index.index_oracle import random_encoding
from uhdsearch.index.inverted import WeightedIndex

ALL_LISTS, ALL_BITMAPS = 1e-9, 1e30


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 700), density=st.floats(0.0, 0.4),
       bias=st.sampled_from([ALL_LISTS, 8.0, ALL_BITMAPS]), k=st.integers(1, 80), norm=st.sampled_from([0.0, 0.3]),
       use_deleted=st.booleans())
def test_a_document_range_searches_as_the_masked_whole(seed, n, density, bias, k, norm, use_deleted):
    rng = np.random.default_rng(seed)
    docs = random_encoding(rng, n, 60, 2, density, dense_dims=4)
    queries = random_encoding(rng, 5, 60, 2, min(1.0, 2 * density + 0.1), dense_dims=4)
    index = WeightedIndex.from_encoding(docs, [str(i) for i in range(n)], None, bitmap_bias=bias)
    lo = 64 * int(rng.integers(0, (n + 63) // 64))
    hi = int(rng.integers(lo + 1, n + 1))
    deleted = rng.random(n) < 0.3 if use_deleted else np.zeros(n, bool)
    outside = deleted.copy()
    outside[:lo] = outside[hi:] = True
    for scoring in ("binary", "weighted"):
        norm_here = norm if scoring == "binary" else 0.0
        got = index.search_encoded(queries, k, [1.0, 0.5], scoring, deleted=deleted, documents=(lo, hi),
                                   length_norm=norm_here)
        want = index.search_encoded(queries, k, [1.0, 0.5], scoring, deleted=outside, length_norm=norm_here)
        assert np.array_equal(got[0], want[0]) and np.allclose(got[1], want[1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("documents", [(1, 10), (0, 0), (64, 50), (0, 10_000), (-64, 10)])
def test_a_bad_range_is_an_error_naming_it(documents):
    rng = np.random.default_rng(0)
    docs = random_encoding(rng, 200, 16, 1, 0.2)
    index = WeightedIndex.from_encoding(docs, [str(i) for i in range(200)], None)
    with pytest.raises(ValueError, match=r"documents=\("):
        index.search_encoded(docs[:2], 5, [1.0], "binary", documents=documents)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), sizes=st.lists(st.integers(1, 150), min_size=1, max_size=4),
       k=st.integers(1, 30), norm=st.sampled_from([0.0, 0.3]))
@example(seed=7574, sizes=[1], k=1, norm=0.0)  # once deleted every document (CI's failure)
def test_a_segmented_index_searches_a_range_as_its_masked_whole(tmp_path_factory, seed, sizes, k, norm):
    from uhdsearch.index.live.segments import SegmentedIndex

    rng = np.random.default_rng(seed)
    index = SegmentedIndex.create(tmp_path_factory.mktemp("seg") / "live", "binary", dim=40, n_buckets=1,
                                  encoder_digest="test")
    start = 0
    for size in sizes:  # one segment each, some of their documents deleted
        index.add(random_encoding(rng, size, 40, 1, 0.2, dense_dims=3), [f"d{start + i}" for i in range(size)])
        index.commit()
        start += size
    # d0 stays: with every document deleted, a one-segment index has no numbers left to take a range of
    gone = [f"d{i}" for i in range(1, start) if rng.random() < 0.2]
    if gone:
        index.delete(gone)
        index.commit()
    queries = random_encoding(rng, 3, 40, 1, 0.5, dense_dims=3)
    n = len(index.doc_ids)  # doc numbers, the deleted ones too
    lo = 64 * int(rng.integers(0, (n + 63) // 64))
    hi = int(rng.integers(lo + 1, n + 1))
    outside = np.ones(n, bool)
    outside[lo:hi] = False
    got = index.search_encoded(queries, k, [1.0], "binary", documents=(lo, hi), length_norm=norm)
    want = index.search_encoded(queries, k, [1.0], "binary", deleted=outside, length_norm=norm)
    index.close()
    assert np.array_equal(got[0], want[0]) and np.allclose(got[1], want[1], rtol=0, atol=1e-12)
