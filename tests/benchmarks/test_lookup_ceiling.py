"""benchmarks/lookup_queries.py --ceiling: each token's winners chosen only among its table row's dims."""
import numpy as np
import scipy.sparse as sp
import torch
from lookup_queries import choose_among

from uhdsearch.encoder.winners import pooled_csr


def test_winners_come_from_the_candidates_only_best_first():
    z = torch.tensor([[5.0, 1.0, 3.0, 4.0, 2.0], [0.5, 0.9, -1.0, 0.7, 0.1]])
    candidates = sp.csr_matrix(np.array([[0, 1, 1, 0, 1], [1, 0, 1, 1, 0]], np.float32))
    values, dims = choose_among(z, candidates, 2)
    assert dims.tolist() == [[2, 4], [3, 0]]  # row 0 never takes dims 0 or 3, its two best
    assert np.allclose(values.numpy(), [[3.0, 2.0], [0.7, 0.5]])


def test_all_dims_as_candidates_is_the_plain_top_k():
    rng = np.random.default_rng(0)
    z = torch.from_numpy(rng.standard_normal((6, 50)).astype(np.float32))
    values, dims = choose_among(z, sp.csr_matrix(np.ones((6, 50), np.float32)), 7)
    want_values, want_dims = torch.topk(z, 7, dim=1)
    assert torch.equal(dims, want_dims) and torch.equal(values, want_values)


def test_fewer_candidates_than_winners_pool_to_the_candidates_alone():
    """Rows with 1 and 0 candidates: the -inf filler winners vanish in pooling, as non-positive values do."""
    z = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    values, dims = choose_among(z, sp.csr_matrix(np.array([[1, 0, 0], [0, 0, 0]], np.float32)), 2)
    assert values[0, 0] == 1.0 and dims[0, 0] == 0 and torch.isinf(values[0, 1]) and torch.isinf(values[1]).all()
    pooled = pooled_csr(values, dims, torch.tensor([0, 1]), 2, 3)
    assert pooled.indptr.tolist() == [0, 1, 1] and pooled.indices.tolist() == [0]
