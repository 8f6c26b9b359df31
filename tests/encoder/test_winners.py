"""The inference WTA kernels: top-k with the one tie rule, and max-pool straight to CSR."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from uhdsearch.encoder.model import UHDEncoder, rows_to_csr
from uhdsearch.encoder.pooling import l2_normalize, max_pool_winners
from uhdsearch.encoder.precision import wta_product
from uhdsearch.encoder.winners import PARALLEL_ROWS, pooled_csr, top_winners
from uhdsearch.evaluation.datasets import load_corpus


def _expected(z: torch.Tensor, k: int) -> np.ndarray:
    """The rule spelled out: sort each row by (value desc, dim asc) and keep k."""
    values = z.float().numpy()
    return np.stack([np.lexsort((np.arange(row.size), -row))[:k] for row in values])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), dim=st.integers(1, 700), k=st.integers(1, 60), seed=st.integers(0, 10_000),
       levels=st.sampled_from([3, 50, 0]), dtype=st.sampled_from([torch.bfloat16, torch.float32]))
def test_top_winners_follow_the_tie_rule(n, dim, k, seed, levels, dtype):
    k = min(k, dim)
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, dim, generator=g)
    if levels:  # few distinct values: ties everywhere, negatives included
        z = torch.round(z * levels / 3) / levels
    z = z.to(dtype)
    values, dims = top_winners(z, k)
    want = _expected(z, k)
    assert np.array_equal(dims.numpy(), want)
    assert torch.equal(values, torch.gather(z, 1, dims).float())


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), dim=st.integers(1, 700), k=st.integers(1, 60), seed=st.integers(0, 10_000),
       rows=st.sampled_from([1, PARALLEL_ROWS]), halfway=st.booleans())
def test_float32_read_as_bfloat16_gives_the_winners_of_the_rounded_tensor(n, dim, k, seed, rows, halfway):
    """The emulated path's top-k rounds as it reads: exactly the winners and values of z.bfloat16(), including
    values that sit halfway between two bfloat16 numbers (ties to even) and negatives."""
    k = min(k, dim)
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n if rows == 1 else rows, dim, generator=g)
    if halfway:  # bfloat16 numbers plus half a step: rounding decides between neighbours
        z = z.bfloat16().float().view(torch.int32) | 0x8000
        z = z.view(torch.float32)
    values, dims = top_winners(z, k, round_bfloat16=True)
    want_values, want_dims = top_winners(z.bfloat16(), k)
    assert torch.equal(dims, want_dims) and torch.equal(values, want_values)


def test_top_winners_agree_with_torch_topk_wherever_the_kth_value_is_not_tied():
    g = torch.Generator().manual_seed(0)
    z = (torch.randn(PARALLEL_ROWS + 3, 4099, generator=g) * 3).to(torch.bfloat16)  # the parallel kernel
    values, dims = top_winners(z, 40)
    ref_values, ref_dims = torch.topk(z, 41, dim=1)
    untied = ref_values[:, 39] != ref_values[:, 40]
    assert untied.sum() > 10 and (~untied).sum() > 10  # both cases occur
    ours = torch.sort(dims, 1).values
    theirs = torch.sort(ref_dims[:, :40], 1).values
    assert torch.equal(ours[untied], theirs[untied])
    assert torch.equal(torch.sort(values, 1).values, torch.sort(ref_values[:, :40].float(), 1).values)


def test_top_winners_reject_other_dtypes_and_bad_k():
    with pytest.raises(TypeError):
        top_winners(torch.zeros(2, 4, dtype=torch.float64), 1)
    with pytest.raises(ValueError):
        top_winners(torch.zeros(2, 4), 5)


@settings(max_examples=40, deadline=None)
@given(n_texts=st.integers(1, 5), n_tokens=st.integers(0, 30), k=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_pooled_csr_equals_the_dense_pool(n_texts, n_tokens, k, seed):
    g = torch.Generator().manual_seed(seed)
    dim = 64
    values = torch.randn(n_tokens, k, generator=g)
    dims = torch.stack([torch.randperm(dim, generator=g)[:k] for _ in range(n_tokens)]) if n_tokens \
        else torch.zeros(0, k, dtype=torch.long)
    token_text = torch.randint(0, n_texts, (n_tokens,), generator=g)
    got = pooled_csr(values, dims, token_text, n_texts, dim)
    want = rows_to_csr(l2_normalize(max_pool_winners(values, dims, token_text, n_texts, dim)))
    assert got.has_sorted_indices
    assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
    np.testing.assert_allclose(got.data, want.data, rtol=1e-6)


def test_documents_keep_their_active_dims_except_at_a_tie(tiny_backbone_dir, tiny_config, scifact_mini_dir):
    """Real documents through the real (tiny) backbone, bfloat16 WTA as shipped: the kernel changes a token's
    winners only where torch.topk had to break a tie at the k-th value, and a document's vector only through
    such tokens."""
    texts = [d.full_text for d in load_corpus(scifact_mini_dir / "corpus.jsonl").values()][:40]
    model = UHDEncoder.new(tiny_backbone_dir, tiny_config.replace(wta_dtype="bfloat16")).eval()
    k = model.config.wta_k
    batch = model.backbone.tokenize(texts, model.config.document_max_length)
    with torch.inference_mode():
        states = model.backbone(batch["input_ids"], batch["attention_mask"], model.layers)
        keep = batch["attention_mask"].bool()
        token_text = torch.nonzero(keep, as_tuple=True)[0]
        encoded = model.pool_tokens([s[keep] for s in states], token_text, len(texts), sparse=True)
        for b, layer in enumerate(model.layers):
            wta = model.buckets.wta[str(layer)]
            weight, bias = wta.cast_weight(torch.bfloat16)
            z = wta_product(states[b][keep], weight, bias, torch.bfloat16)  # this process's path
            ref_values, ref_dims = torch.topk(z, k + 1, dim=1)
            tied = ref_values[:, k - 1] == ref_values[:, k]
            _, dims = top_winners(z, k)
            same = (torch.sort(dims, 1).values == torch.sort(ref_dims[:, :k], 1).values).all(1)
            assert (~tied).sum() > 100 and same[~tied].all()
            old = rows_to_csr(l2_normalize(max_pool_winners(ref_values[:, :k].float(), ref_dims[:, :k], token_text,
                                                             len(texts), wta.dim)))
            new = encoded[b]
            kth = ref_values[:, k - 1:k]
            for d in range(len(texts)):
                mine = (token_text == d) & tied
                tied_dims = set(torch.nonzero(z[mine] == kth[mine], as_tuple=True)[1].tolist())
                changed = set(new[d].indices.tolist()) ^ set(old[d].indices.tolist())
                assert changed <= tied_dims  # only dims tied at some token's k-th place
