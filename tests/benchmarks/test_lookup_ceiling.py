"""benchmarks/experiments/lookup_queries.py --ceiling: each token's winners chosen only among its table row's dims."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from benchmarks.experiments.lookup_queries import ceiling_batch, choose_among

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
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


@pytest.fixture(scope="module")
def model(tiny_backbone_dir):
    config = EncoderConfig(dim=512, wta_k=8, query_k=None, bucket_layers=(-1,), query_max_length=16)
    return UHDEncoder.new(tiny_backbone_dir, config).eval()  # bfloat16 WTA product, as the quickstart model's


def batch_states(model, texts):
    states = model.token_states(texts, "query", show_progress=False)
    (tokens,), token_text = states.gather(list(range(len(texts))), model.layers)
    ids = model.backbone.tokenizer(texts, truncation=True, max_length=16)["input_ids"]
    return tokens, np.concatenate([np.asarray(x, np.int64) for x in ids]), token_text


def test_the_unrestricted_choice_is_the_encoder_without_cls_and_sep(model):
    """With [CLS] and [SEP] given no dims, ceiling_batch must be the model's own query vectors."""
    texts = ["bone density in older women", "heart failure", "the mouse genome after surgery"]
    tokens, ids, token_text = batch_states(model, texts)
    wta = model.buckets.wta[str(model.layers[0])]
    special = np.isin(ids, model.backbone.tokenizer.all_special_ids)
    got = ceiling_batch(model, tokens, ids, token_text, len(texts))
    with torch.inference_mode():
        values, dims = wta(tokens[torch.from_numpy(~special)], model.config.wta_k, torch.bfloat16)
    want = pooled_csr(values, dims, token_text[torch.from_numpy(~special)], len(texts), wta.dim)
    assert (got != want).nnz == 0 and got.nnz > 0
    full = model.encode(texts, "query", show_progress=False).buckets[0]
    assert full.nnz > got.nnz  # the encoder's own vectors hold the [CLS] and [SEP] winners too


def test_each_tokens_own_winners_as_its_candidates_change_nothing(model):
    """Candidates lined up with the right tokens leave the choice as it is; shifted by one token they change it."""
    texts = ["bone density in older women", "heart failure after surgery"]
    tokens, ids, token_text = batch_states(model, texts)
    wta = model.buckets.wta[str(model.layers[0])]
    with torch.inference_mode():
        _, dims = wta(tokens, model.config.wta_k, torch.bfloat16)
    own = sp.csr_matrix((np.ones(dims.numel(), np.float32), dims.numpy().ravel(),
                         np.arange(0, dims.numel() + 1, dims.shape[1])), shape=(len(ids), wta.dim))
    free = ceiling_batch(model, tokens, ids, token_text, len(texts))
    aligned = ceiling_batch(model, tokens, ids, token_text, len(texts), lambda i, positions: own[positions])
    shifted = ceiling_batch(model, tokens, ids, token_text, len(texts), lambda i, positions: own[positions - 1])
    assert (aligned != free).nnz == 0
    assert (shifted != free).nnz > 0
