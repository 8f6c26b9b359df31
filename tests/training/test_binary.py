"""The binary-aware objective: the STE's forward is the deployed count, its backward the relaxation's."""
from __future__ import annotations

import math

import pytest
import torch

from uhdsearch.training.binary import (annealed_tau, binarize_ste, binary_overlap, binary_relevance, relax,
                                       scale_rows)


def _pooled(n: int, dim: int, active: int, seed: int) -> torch.Tensor:
    """Non-negative rows with `active` positive entries each, like max-pooled WTA buckets."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n, dim)
    for i in range(n):
        cols = torch.randperm(dim, generator=g)[:active]
        x[i, cols] = 0.05 + torch.rand(active, generator=g)
    return x


@pytest.mark.parametrize("tau", [None, 0.3])
def test_ste_forward_is_the_exact_binary_overlap(tau):
    q, d = _pooled(3, 64, 12, 0), _pooled(4, 64, 20, 1)
    exact = (q > 0).float() @ (d > 0).float().t()
    assert torch.equal(binary_overlap(q, d, tau, "ste"), exact)
    assert float(exact.sum()) > 0


def test_ste_gradient_equals_the_relaxation_gradient_on_a_linear_read_out():
    x = _pooled(2, 16, 5, 2)
    weights = torch.randn(2, 16, generator=torch.Generator().manual_seed(3))
    a = x.clone().requires_grad_(True)
    b = x.clone().requires_grad_(True)
    (weights * binarize_ste(a, 0.4)).sum().backward()
    (weights * relax(b, 0.4)).sum().backward()
    assert torch.equal(a.grad, b.grad)
    c = x.clone().requires_grad_(True)  # tau=None: identity on active dims, zero elsewhere
    (weights * binarize_ste(c)).sum().backward()
    assert torch.equal(c.grad, weights * (x > 0))


def test_ste_overlap_gradient_equals_relaxed_query_times_binary_documents():
    # With the documents fixed, STE's gradient w.r.t. the queries is that of relax(q) @ binary(d)^T.
    q, d = _pooled(2, 32, 8, 4), _pooled(3, 32, 16, 5)
    w = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.0, 1.0]])
    a = q.clone().requires_grad_(True)
    (w * binary_overlap(a, d, 0.2, "ste")).sum().backward()
    b = q.clone().requires_grad_(True)
    (w * (relax(scale_rows(b), 0.2) @ (d > 0).float().t())).sum().backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-6)
    assert float(a.grad.abs().sum()) > 0


def test_relaxation_approaches_the_binary_score_as_tau_falls():
    q, d = _pooled(3, 64, 12, 6), _pooled(5, 64, 20, 7)
    exact = (q > 0).float() @ (d > 0).float().t()
    gaps = [float((binary_overlap(q, d, tau, "relaxed") - exact).abs().max()) for tau in (1.0, 0.1, 0.01, 1e-4)]
    assert gaps == sorted(gaps, reverse=True) and gaps[0] > 1.0
    assert gaps[-1] < 1e-4


def test_binary_relevance_is_the_count_over_the_query_active_count_with_bucket_weights():
    q1, d1 = _pooled(2, 32, 6, 8), _pooled(3, 32, 12, 9)
    q2, d2 = _pooled(2, 32, 4, 10), _pooled(3, 32, 10, 11)
    count = 1.0 * (q1 > 0).float() @ (d1 > 0).float().t() + 0.5 * (q2 > 0).float() @ (d2 > 0).float().t()
    active = torch.tensor([6 + 0.5 * 4, 6 + 0.5 * 4])
    out = binary_relevance([q1, q2], [d1, d2], [1.0, 0.5])
    assert torch.allclose(out, count / active.unsqueeze(1))
    assert torch.equal(out.argsort(dim=1), count.argsort(dim=1))  # per-query ranking = the deployed count's


def test_annealed_tau_is_geometric():
    assert annealed_tau(0, 11, 1.0, 0.01) == 1.0
    assert math.isclose(annealed_tau(10, 11, 1.0, 0.01), 0.01)
    assert math.isclose(annealed_tau(5, 11, 1.0, 0.01), 0.1)
    assert annealed_tau(7, 11, 0.3, None) == 0.3


def test_relax_and_estimator_reject_bad_arguments():
    with pytest.raises(ValueError, match="tau=0 must be positive"):
        relax(torch.ones(1, 2), 0)
    with pytest.raises(ValueError, match="needs a tau"):
        binary_overlap(torch.ones(1, 2), torch.ones(1, 2), None, "relaxed")
    with pytest.raises(ValueError, match="choose 'ste' or 'relaxed'"):
        binary_overlap(torch.ones(1, 2), torch.ones(1, 2), 0.1, "hard")
