import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from uhdsearch.sparse import SparseEncoding


def _random(seed, n=6, dim=50, density=0.3, n_buckets=2):
    rng = np.random.default_rng(seed)
    return SparseEncoding([sp.random(n, dim, density=density, format="csr", dtype=np.float32, random_state=rng,
                                     data_rvs=lambda k: rng.integers(1, 5, k).astype(np.float32))
                           for _ in range(n_buckets)])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_binarize_is_idempotent_and_keeps_the_support(seed):
    enc = _random(seed)
    once, twice = enc.binarize(), enc.binarize().binarize()
    for a, b, c in zip(enc.buckets, once.buckets, twice.buckets):
        assert np.array_equal(b.indices, a.indices) and np.all(b.data == 1)
        assert (b != c).nnz == 0


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), top_k=st.integers(1, 20))
def test_truncate_keeps_the_largest_values_with_ties_to_the_lower_dim(seed, top_k):
    enc = _random(seed)
    cut = enc.truncate(top_k)
    for full, kept in zip(enc.buckets, cut.buckets):
        for r in range(full.shape[0]):
            row = full[r]
            order = sorted(zip(row.indices, row.data), key=lambda x: (-x[1], x[0]))[:top_k]
            assert sorted(d for d, _ in order) == sorted(kept[r].indices.tolist())
    assert enc.truncate(None) is enc
