import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from uhdsearch.encoder.pooling import l2_normalize, max_pool_winners
from uhdsearch.encoder.precision import cast_for_product, wta_product
from uhdsearch.encoder.wta import WTALayer


@settings(max_examples=25, deadline=None)
@given(n_tokens=st.integers(1, 12), wta_k=st.integers(1, 40), seed=st.integers(0, 1000))
def test_wta_keeps_exactly_the_k_largest(n_tokens, wta_k, seed):
    layer = WTALayer(hidden=16, dim=64, weight_sparsity=0.5, seed=seed)
    x = torch.randn(n_tokens, 16, generator=torch.Generator().manual_seed(seed))
    values, indices = layer(x, wta_k)
    z = (x @ layer.weight.t() + layer.bias).detach()
    assert values.shape == (n_tokens, wta_k)
    for t in range(n_tokens):
        assert len(set(indices[t].tolist())) == wta_k
        expected = torch.sort(z[t], descending=True).values[:wta_k]
        assert torch.allclose(torch.sort(values[t], descending=True).values, expected, atol=1e-5)
        assert torch.allclose(values[t], z[t, indices[t]], atol=1e-5)


def test_mask_zeroes_the_configured_share_of_every_unit():
    layer = WTALayer(hidden=40, dim=100, weight_sparsity=0.7, seed=3)
    zeros_per_unit = (~layer.mask).sum(dim=1)
    assert torch.all(zeros_per_unit == 28)
    assert torch.all(layer.weight[~layer.mask] == 0)


def test_gradients_flow_only_through_winners_and_unmasked_weights():
    layer = WTALayer(hidden=8, dim=50, weight_sparsity=0.5, seed=1)
    x = torch.randn(3, 8, requires_grad=True)
    values, indices = layer(x, 4)
    (values * torch.arange(1, 13, dtype=torch.float32).view(3, 4)).sum().backward()
    winners = set(indices.flatten().tolist())
    losers = [d for d in range(50) if d not in winners]
    assert torch.all(layer.weight.grad[losers] == 0)
    assert torch.all(layer.bias.grad[losers] == 0)
    assert torch.all(layer.weight.grad[~layer.mask] == 0)
    assert layer.weight.grad[sorted(winners)].abs().sum() > 0
    # Against autograd on the dense formulation: same gradients for x and W.
    x2 = x.detach().clone().requires_grad_(True)
    w2 = layer.weight.detach().clone().requires_grad_(True)
    z = x2 @ (w2 * layer.mask).t() + layer.bias.detach()
    chosen = torch.gather(z, 1, indices)
    (chosen * torch.arange(1, 13, dtype=torch.float32).view(3, 4)).sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-5)
    assert torch.allclose(layer.weight.grad, w2.grad, atol=1e-5)


def test_wta_k_out_of_range_is_rejected():
    layer = WTALayer(hidden=4, dim=10)
    with pytest.raises(ValueError, match="wta_k=11 must satisfy"):
        layer(torch.randn(2, 4), 11)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_texts=st.integers(1, 4))
def test_max_pool_equals_dense_reference_and_norm_is_one_or_zero(seed, n_texts):
    rng = np.random.default_rng(seed)
    dim, k = 30, 3
    n_tokens = int(rng.integers(1, 10))
    token_text = torch.from_numpy(rng.integers(0, n_texts, n_tokens)).long()
    indices = torch.from_numpy(np.stack([rng.choice(dim, k, replace=False) for _ in range(n_tokens)])).long()
    values = torch.from_numpy(rng.normal(size=(n_tokens, k))).float()
    pooled = max_pool_winners(values, indices, token_text, n_texts, dim)
    dense = torch.zeros(n_tokens, dim)
    dense.scatter_(1, indices, values)
    for t in range(n_texts):
        rows = dense[token_text == t]
        expected = torch.zeros(dim) if rows.shape[0] == 0 else rows.max(dim=0).values.clamp_min(0)
        assert torch.allclose(pooled[t], expected)
    norms = l2_normalize(pooled).norm(dim=1)
    assert all(abs(n - 1) < 1e-5 or n == 0 for n in norms.tolist())


def test_centering_makes_the_mean_state_project_to_zero():
    layer = WTALayer(hidden=16, dim=200, weight_sparsity=0.5, seed=2)
    states = torch.randn(500, 16) + 3.0  # a shared offset, like the anisotropy of backbone states
    layer.center_(states.mean(dim=0))
    z_mean = states.mean(dim=0, keepdim=True) @ layer.weight.t() + layer.bias
    assert torch.allclose(z_mean, torch.zeros_like(z_mean), atol=1e-4)
    # With the offset removed, winners spread over far more units than before.
    _, winners_after = layer(states, 5)
    layer.bias.data.zero_()
    _, winners_before = layer(states, 5)
    assert winners_after.unique().numel() > 2 * winners_before.unique().numel()


def test_cached_low_precision_weight_follows_weight_updates():
    layer = WTALayer(hidden=16, dim=256, seed=3)
    tokens = torch.randn(5, 16)
    with torch.no_grad():
        before = layer(tokens, 8, torch.bfloat16)
        layer.weight.mul_(-1.0)  # an optimizer step also bumps the version counter
        after = layer(tokens, 8, torch.bfloat16)
    assert not torch.equal(before[1].sort(dim=1).values, after[1].sort(dim=1).values)
    z = wta_product(tokens, cast_for_product(layer.weight.detach(), torch.bfloat16),
                    cast_for_product(layer.bias.detach(), torch.bfloat16), torch.bfloat16)
    fresh = torch.topk(z, 8, dim=1).indices
    assert torch.equal(after[1].sort(dim=1).values, fresh.sort(dim=1).values)
