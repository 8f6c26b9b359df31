"""A query student's states stand in for the backbone's last layer; the model's own WTA head pools them."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.query.student import QueryStudent, StudentQueryEncoder, backbone_fingerprint
from uhdsearch.errors import ModelFormatError, UsageError

QUERIES = ["vitamin D deficiency and bone fractures", "aspirin", "the role of gut microbiota in obesity and "
           "type 2 diabetes among adults who eat a western diet rich in fat and sugar over many years"]


@pytest.fixture(scope="module")
def model(tiny_backbone_dir):
    return UHDEncoder.new(tiny_backbone_dir, EncoderConfig(dim=2048, wta_k=16, query_k=None,
                                                           query_max_length=16)).eval()


def perturbed(model, seed: int = 0) -> QueryStudent:
    """A 1-layer student whose head is not the identity, so its states differ from every backbone layer's."""
    student = QueryStudent(model.backbone, 1)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        student.head.weight.add_(0.3 * torch.randn(student.head.weight.shape, generator=generator))
        student.head.bias.add_(0.1 * torch.randn(student.head.bias.shape, generator=generator))
    return student.eval()


def test_an_untrained_student_gives_the_states_of_its_last_layer(model):
    student = QueryStudent(model.backbone, 1)
    batch = model.backbone.tokenize(QUERIES, 16)
    with torch.inference_mode():
        got = student(batch["input_ids"], batch["attention_mask"])
        (want,) = model.backbone(batch["input_ids"], batch["attention_mask"], [1])
    assert torch.allclose(got, want, atol=1e-6)
    assert student.words.data_ptr() == model.backbone.model.embeddings.word_embeddings.weight.data_ptr()  # a view
    assert student.model.embeddings.word_embeddings is None
    assert len(student.model.encoder.layer) == 1 and len(model.backbone.model.encoder.layer) == 2
    for layers in (0, 2, True, 1.0):
        with pytest.raises(UsageError, match="layers"):
            QueryStudent(model.backbone, layers)


def test_student_queries_are_the_model_pooling_of_the_student_states(model):
    student = perturbed(model)
    encoded = StudentQueryEncoder(model, student).encode(QUERIES, "query")
    for row, text in enumerate(QUERIES):
        ids = model.backbone.tokenize([text], 16)
        with torch.inference_mode():
            states = student(ids["input_ids"], ids["attention_mask"])[0]
            (want,) = model.pool_tokens([states], torch.zeros(len(states), dtype=torch.long), 1, sparse=True)
        got = encoded.buckets[0][row]
        assert np.array_equal(got.indices, want.indices) and np.allclose(got.data, want.data, atol=1e-6)
    assert encoded.truncated.tolist() == [False, False, True]  # the third is over 16 tokens
    full = model.encode(QUERIES, "query").buckets[0]
    assert (encoded.buckets[0] != 0).sum() > 0 and (abs(encoded.buckets[0] - full) > 1e-3).nnz > 0
    assert StudentQueryEncoder(model, student).encode([], "query").buckets[0].shape == (0, 2048)
    with pytest.raises(UsageError, match="queries only"):
        StudentQueryEncoder(model, student).encode(QUERIES, "document")


def test_onnx_runtime_gives_the_same_queries(model):
    student = perturbed(model)
    eager = StudentQueryEncoder(model, student).encode(QUERIES).buckets[0]
    onnx = StudentQueryEncoder(model, student, onnx=True, threads=1).encode(QUERIES).buckets[0]
    assert np.array_equal(eager.indptr, onnx.indptr) and np.array_equal(eager.indices, onnx.indices)
    assert np.allclose(eager.data, onnx.data, atol=1e-4)


def test_a_model_whose_buckets_are_not_on_the_last_layer_is_refused(tiny_backbone_dir, model):
    two_buckets = UHDEncoder.new(tiny_backbone_dir, EncoderConfig(dim=2048, wta_k=16, query_k=None,
                                                                  bucket_layers=(1, 2)))
    with pytest.raises(UsageError, match=r"last layer \(2\).*\[1, 2\]"):
        StudentQueryEncoder(two_buckets, QueryStudent(model.backbone, 1))


def test_save_then_load_keeps_the_float16_weights_and_the_record(model, tmp_path):
    student = perturbed(model)
    student.record = {"epochs": 3, "held_out_loss": 0.5}
    path = student.save(tmp_path / "student.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["student.safetensors"]  # no temporary file left
    loaded = QueryStudent.load(path, model.backbone)
    assert loaded.layers == 1 and loaded.record == {"epochs": 3, "held_out_loss": 0.5}
    for name, tensor in student.trained_state().items():
        assert torch.equal(loaded.trained_state()[name], tensor.to(torch.float16).float()), name
    assert set(load_file(str(path))) == set(student.trained_state())  # the embeddings are not stored
    with torch.no_grad():
        student.head.weight[0, 0] = 1e6  # beyond float16: it would be stored as inf
    with pytest.raises(UsageError, match="beyond-float16"):
        student.save(path)
    assert QueryStudent.load(path, model.backbone).record == {"epochs": 3, "held_out_loss": 0.5}  # file unchanged


def test_the_student_leaves_the_backbone_alone_and_a_training_model_encodes_as_in_eval(model, tiny_backbone_dir):
    import copy

    training = copy.deepcopy(model).train()
    student = perturbed(training)
    assert all(module.training for module in training.backbone.model.modules())  # student.eval() did not reach it
    words = training.backbone.model.embeddings.word_embeddings.weight
    assert all(p is not words for p in student.parameters())
    encoder = StudentQueryEncoder(training, student)
    training.encode(["a document about bone density"], "document")  # leaves the model training, as it was
    first, second = (encoder.encode(QUERIES).buckets[0] for _ in range(2))
    want = StudentQueryEncoder(model, student).encode(QUERIES).buckets[0]  # the same weights, eval mode
    assert (first != second).nnz == 0 and (first != want).nnz == 0
    assert training.training and training.backbone.model.embeddings.dropout.training


def test_batches_wta_k_and_batch_size(model):
    student = perturbed(model)
    encoder = StudentQueryEncoder(model, student)
    texts = QUERIES + ["bone", "the effect of statins on muscle pain"]
    whole = encoder.encode(texts).buckets[0]
    pairs = encoder.encode(texts, batch_size=2).buckets[0]  # three length-sorted batches, put back in order
    assert np.array_equal(whole.indptr, pairs.indptr) and np.array_equal(whole.indices, pairs.indices)
    assert np.allclose(whole.data, pairs.data, atol=1e-5)
    few = encoder.encode(texts, wta_k=2).buckets[0]
    ids = model.backbone.tokenize([texts[3]], 16)
    with torch.inference_mode():
        states = student(ids["input_ids"], ids["attention_mask"])[0]
        (want,) = model.pool_tokens([states], torch.zeros(len(states), dtype=torch.long), 1, 2, sparse=True)
    assert np.array_equal(few[3].indices, want.indices) and few[3].nnz <= 2 * len(states) < whole[3].nnz
    for bad in (0, -1):
        with pytest.raises(UsageError, match="batch_size"):
            encoder.encode(texts, batch_size=bad)


def _rewrite(path, tensors=None, **metadata_changes):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        metadata = dict(f.metadata())
        stored = {k: f.get_tensor(k) for k in f.keys()}
    metadata.update(metadata_changes)
    save_file(stored if tensors is None else tensors(stored), str(path), metadata=metadata)


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.write_bytes(p.read_bytes()[:1000]), "not a readable safetensors file"),
    (lambda p: _rewrite(p, format="uhd-encoder"), "not a query student"),
    (lambda p: _rewrite(p, layers="7"), "layers '7'"),
    (lambda p: _rewrite(p, backbone="0" * 32), "distilled from backbone"),
    (lambda p: _rewrite(p, record="{not json"), "training record"),
    (lambda p: _rewrite(p, record="[1, 2]"), "not a JSON object"),
    (lambda p: _rewrite(p, layers="\u00b9"), "layers"),
    (lambda p: _rewrite(p, format_version="2"), "not a query student"),
    (lambda p: _rewrite(p, lambda t: {**t, "head.bias": t["head.bias"].to(torch.int32)}), "floating point"),
    (lambda p: _rewrite(p, lambda t: {k: v for k, v in t.items() if k != "head.bias"}), "missing"),
    (lambda p: _rewrite(p, lambda t: {**t, "head.bias": torch.zeros(3, dtype=torch.float16)}), "shape"),
    (lambda p: _rewrite(p, lambda t: {**t, "head.bias": torch.full_like(t["head.bias"], float("nan"))}), "NaN"),
])
def test_a_damaged_or_foreign_student_file_is_refused_naming_it(model, tmp_path, damage, message):
    path = perturbed(model).save(tmp_path / "student.safetensors")
    damage(path)
    with pytest.raises(ModelFormatError, match=message) as error:
        QueryStudent.load(path, model.backbone)
    assert str(path) in str(error.value)
    with pytest.raises(FileNotFoundError, match="no query student"):
        QueryStudent.load(tmp_path / "missing.safetensors", model.backbone)


def test_the_shipped_student_predicts_minilm_last_layer_states(scifact_mini_dir):
    """The committed student (benchmarks/experiments/query_student_gpu.py, a GPU run) is far closer to MiniLM's last layer
    than the same 2 layers untrained; and it was distilled from the default backbone."""
    from pathlib import Path

    from uhdsearch.encoder.backbone import Backbone
    from uhdsearch.evaluation.datasets import load_beir

    backbone = Backbone.from_pretrained(None).eval()
    shipped = Path(__file__).resolve().parents[2] / "models" / "query-student-minilm-l6-2layers.safetensors"
    student = QueryStudent.load(shipped, backbone)
    assert student.layers == 2 and student.fingerprint == backbone_fingerprint(backbone)
    assert student.record["epochs"] == 100 and student.record["distilled_on"] == ["scifact", "cisi", "medline"]
    texts = [q.text for q in load_beir(scifact_mini_dir, "train").queries][:20]
    batch = backbone.tokenize(texts, 32)
    mask = batch["attention_mask"].bool()
    with torch.inference_mode():
        (target,) = backbone(batch["input_ids"], batch["attention_mask"], [6])
        trained = ((student(batch["input_ids"], batch["attention_mask"]) - target)[mask] ** 2).mean()
        untrained = ((QueryStudent(backbone, 2)(batch["input_ids"], batch["attention_mask"]) - target)[mask] ** 2
                     ).mean()
    assert trained < 0.5 * untrained, (float(trained), float(untrained))
