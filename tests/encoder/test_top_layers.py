"""The top backbone layers run on cached lower-layer states (encoder/top_layers.py) and train from them."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import compute_token_states
from uhdsearch.encoder.top_layers import bucket_token_states, cut_layer, input_layers
from uhdsearch.errors import UsageError
from uhdsearch.training.data import ict_pairs, pairs_from_qrels
from uhdsearch.training.trainer import TrainingArgs, train


@pytest.fixture(scope="module")
def texts(mini_data):
    return [d.full_text for d in list(mini_data.corpus.values())[:24]]


def test_the_top_layers_on_cached_states_reproduce_the_full_backbone(tiny_encoder, texts):
    backbone = tiny_encoder.backbone
    states = compute_token_states(backbone, texts, [0, 1, 2], 64, show_progress=False)
    rows = list(range(len(texts)))
    reference, _ = states.gather(rows, [1, 2])
    for cut in (0, 1):  # from the embeddings (two layers re-run) and from layer 1 (one)
        with torch.no_grad():
            got, token_text = bucket_token_states(backbone, states.select([cut]), rows, [1, 2])
        assert torch.equal(token_text, states.gather(rows, [2])[1])
        for layer, (g, r) in enumerate(zip(got, reference), start=1):
            if layer == cut:
                assert torch.equal(g, r)  # read from the cache, not re-run
            scale = float(r.abs().max())
            assert float((g - r).abs().max()) < 0.01 * scale  # bfloat16 input: ~3 significant digits
            assert float(torch.nn.functional.cosine_similarity(g, r).min()) > 0.9999
    # the same encoder, from the cache or from the text, keeps nearly the same active dimensions
    full = tiny_encoder.encode_document(texts, show_progress=False).buckets[1]
    cached = tiny_encoder.encode_states(states.select([1]), show_progress=False).buckets[1]
    overlap = full.multiply(cached).getnnz() / full.getnnz()
    assert overlap > 0.97 and abs(full.getnnz() - cached.getnnz()) < 0.01 * full.getnnz()


def test_missing_layers_and_bad_cuts_are_refused(tiny_encoder, texts):
    backbone = tiny_encoder.backbone
    states = compute_token_states(backbone, texts[:2], [2], 64, show_progress=False)
    with pytest.raises(UsageError, match="cannot give layer 1"):
        bucket_token_states(backbone, states, [0, 1], [1, 2])
    with pytest.raises(UsageError, match="layers \\[2\\], not \\[1\\]"):
        states.select([1])
    with pytest.raises(UsageError, match="0 < N < 2"):
        cut_layer(backbone, 2)
    assert input_layers([1, 2], cut_layer(backbone, 1)) == [1] and input_layers([2], 0) == [0]


def test_a_gradient_reaches_the_top_layer_and_not_the_frozen_ones(tiny_encoder, texts):
    backbone = tiny_encoder.backbone
    backbone.set_trainable_layers(1)
    states = compute_token_states(backbone, texts, [1], 64, show_progress=False)
    vectors = tiny_encoder.forward_states(states, list(range(8)))
    (tiny_encoder.relevance(vectors, vectors).sum()).backward()
    bottom, top = backbone._layer_modules()
    assert all(p.grad is not None for p in top.parameters())
    # every weight matrix gets a gradient (a key bias never does: softmax ignores a shift shared by all keys)
    assert all(float(p.grad.abs().sum()) > 0 for name, p in top.named_parameters() if name.endswith("weight"))
    assert all(p.grad is None for p in bottom.parameters())
    assert all(p.grad is None for p in backbone.model.embeddings.parameters())
    assert float(tiny_encoder.buckets.wta["2"].weight.grad.abs().sum()) > 0


def test_training_the_top_layer_on_cached_states_saves_it_with_the_model(tiny_encoder, mini_data, tmp_path):
    docs = list(mini_data.corpus.values())
    rows = {d.doc_id: i for i, d in enumerate(docs)}
    pairs = pairs_from_qrels(mini_data.queries, mini_data.qrels, rows)[:16] + ict_pairs(docs[:40], 1)
    bottom, top = tiny_encoder.backbone._layer_modules()
    top_before = top.output.dense.weight.detach().clone()
    bottom_before = bottom.output.dense.weight.detach().clone()
    texts = [d.full_text for d in docs[:30]]
    untrained = tiny_encoder.encode_document(texts, show_progress=False)
    # only the states at layer 1 are given: layer 2 (a bucket) can only come from running the top layer
    states = compute_token_states(tiny_encoder.backbone, [d.full_text for d in docs], [1], 64, show_progress=False)
    args = TrainingArgs(epochs=2, batch_size=8, learning_rate=3e-3, backbone_learning_rate=1e-3, warmup_ratio=0.0,
                        train_backbone_layers=1)
    result = train(tiny_encoder, docs, pairs, args, document_states=states, show_progress=False)
    assert result.steps >= 4 and np.isfinite(result.losses).all()
    assert not torch.equal(top_before, top.output.dense.weight)
    assert torch.equal(bottom_before, bottom.output.dense.weight)
    trained = tiny_encoder.encode_document(texts, show_progress=False)
    assert (trained.buckets[1] != untrained.buckets[1]).nnz > 0
    tiny_encoder.save_pretrained(tmp_path / "model")
    loaded = UHDEncoder.from_pretrained(tmp_path / "model")
    assert torch.equal(loaded.backbone._layer_modules()[1].output.dense.weight, top.output.dense.weight)
    again = loaded.encode_document(texts, show_progress=False)
    for a, b in zip(again.buckets, trained.buckets):
        assert (a != b).nnz == 0
    assert loaded.digest() == tiny_encoder.digest()
    with pytest.raises(UsageError, match="not \\[1\\]"):  # states without the top layer's input are refused
        train(tiny_encoder, docs, pairs, args, document_states=compute_token_states(
            tiny_encoder.backbone, [d.full_text for d in docs], [2], 64, show_progress=False), show_progress=False)
