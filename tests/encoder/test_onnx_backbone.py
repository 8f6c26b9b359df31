import numpy as np
import pytest
import torch

from uhdsearch.encoder.onnx_backbone import OnnxBackbone

TEXTS = ["Vitamin D deficiency is linked to bone loss.", "Protein folding in bacteria.", "",
         "A much longer query about the regulation of gene expression in stem cells of the bone marrow."]


def test_onnx_states_equal_torch_states_on_padded_batches(tiny_encoder):
    runner = OnnxBackbone(tiny_encoder.backbone, tiny_encoder.layers, threads=1)
    batch = tiny_encoder.backbone.tokenize(TEXTS, 64)
    with torch.inference_mode():
        expected = tiny_encoder.backbone(batch["input_ids"], batch["attention_mask"], tiny_encoder.layers)
    got = runner(batch["input_ids"], batch["attention_mask"], tiny_encoder.layers)
    keep = batch["attention_mask"].bool()
    assert len(got) == len(expected) == 2
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        assert torch.allclose(g[keep], e[keep], atol=1e-4)
    with pytest.raises(ValueError, match="returns layers"):
        runner(batch["input_ids"], batch["attention_mask"], [0])


def test_encoder_with_onnx_runtime_gives_the_same_encodings(tiny_encoder):
    docs = tiny_encoder.encode_document(TEXTS, show_progress=False)
    queries = tiny_encoder.encode_query(TEXTS)
    tiny_encoder.use_onnx_runtime(threads=1)
    for before, after in ((docs, tiny_encoder.encode_document(TEXTS, show_progress=False)),
                          (queries, tiny_encoder.encode_query(TEXTS))):
        for a, b in zip(before.buckets, after.buckets):
            assert np.array_equal(a.indices, b.indices) and np.array_equal(a.indptr, b.indptr)
            assert np.allclose(a.data, b.data, atol=1e-5)


def test_changed_backbone_weights_are_exported_again(tiny_encoder):
    tiny_encoder.use_onnx_runtime(threads=1)
    stale = tiny_encoder.encode_query(TEXTS[:2])
    with torch.no_grad():  # in-place, as an optimizer step would
        for p in tiny_encoder.backbone.model.encoder.parameters():
            p.mul_(0.5)
    got = tiny_encoder.encode_query(TEXTS[:2])  # must notice the change and export again
    tiny_encoder.use_onnx_runtime(False)
    expected = tiny_encoder.encode_query(TEXTS[:2])  # torch, new weights
    assert any((a != b).nnz for a, b in zip(stale.buckets, expected.buckets))  # the change matters
    for a, b in zip(expected.buckets, got.buckets):
        assert np.array_equal(a.indices, b.indices) and np.allclose(a.data, b.data, atol=1e-5)


def test_a_replaced_backbone_is_exported_again(tiny_encoder):
    import copy

    tiny_encoder.use_onnx_runtime(threads=1)
    stale = tiny_encoder.encode_query(TEXTS[:2])
    other = copy.deepcopy(tiny_encoder.backbone)
    with torch.no_grad():
        for p in other.model.encoder.parameters():
            p.mul_(0.5)
    tiny_encoder.backbone = other  # new module and parameter objects: their versions prove nothing
    got = tiny_encoder.encode_query(TEXTS[:2])
    tiny_encoder.use_onnx_runtime(False)
    expected = tiny_encoder.encode_query(TEXTS[:2])
    assert any((a != b).nnz for a, b in zip(stale.buckets, expected.buckets))
    for a, b in zip(expected.buckets, got.buckets):
        assert np.array_equal(a.indices, b.indices) and np.allclose(a.data, b.data, atol=1e-5)


def test_training_passes_still_use_torch_and_get_gradients(tiny_encoder):
    tiny_encoder.use_onnx_runtime(threads=1)
    tiny_encoder.backbone.set_trainable_layers(-1)
    vectors = tiny_encoder(TEXTS[:2], "query")
    vectors[0].sum().backward()
    grads = [p.grad for p in tiny_encoder.backbone.model.encoder.parameters()]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)


def test_a_deep_copy_drops_the_session_and_still_encodes(tiny_encoder):
    import copy

    tiny_encoder.use_onnx_runtime(threads=1)
    twin = copy.deepcopy(tiny_encoder)
    assert twin._onnx is None and tiny_encoder._onnx is not None
    a, b = tiny_encoder.encode_query(TEXTS[:2]), twin.encode_query(TEXTS[:2])
    assert all(np.array_equal(x.indices, y.indices) for x, y in zip(a.buckets, b.buckets))
