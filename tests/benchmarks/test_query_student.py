"""benchmarks/experiments/query_student.py: a shallow student of the backbone, distilled on sentences, pooled as the encoder."""
import numpy as np
import pytest
import torch
from benchmarks.experiments.query_student import Student, distill, encode_with


SENTENCES = [f"{a} {b} changes {c} in older {d}." for a in ("vitamin d", "bone loss", "heart failure", "insulin")
             for b in ("strongly", "rarely") for c in ("density", "risk", "growth", "signalling")
             for d in ("women", "mice")]


@pytest.fixture(scope="module")
def model(tiny_query_model):
    return tiny_query_model


def test_an_untrained_student_gives_its_last_kept_layer(model):
    student = Student(model.backbone, 1).eval()
    batch = model.backbone.tokenize(SENTENCES[:4], 16)
    with torch.no_grad():
        want = model.backbone(batch["input_ids"], batch["attention_mask"], [1])[0]
        got = student(batch["input_ids"], batch["attention_mask"])
    assert torch.allclose(got, want, atol=1e-5)
    with pytest.raises(ValueError, match="keeps 1..1"):
        Student(model.backbone, 2)


def test_distilling_brings_the_student_closer_to_the_last_layer(model):
    torch.manual_seed(0)
    student = Student(model.backbone, 1)
    batch = model.backbone.tokenize(SENTENCES, 16)
    mask = batch["attention_mask"].bool()

    def error() -> float:
        with torch.no_grad():
            teacher = model.backbone(batch["input_ids"], batch["attention_mask"], model.layers)[0][mask]
            return float(((student(batch["input_ids"], batch["attention_mask"])[mask] - teacher) ** 2).mean())

    before = error()
    losses = distill(model, student, SENTENCES, epochs=4, lr=1e-3, batch_size=16, seed=0)
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert error() < 0.7 * before
    assert not student.training


def test_a_student_that_gives_the_teachers_states_encodes_as_the_full_encoder(model):
    texts = SENTENCES[:5] + ["bone"]
    teacher = lambda ids, mask: model.backbone(ids, mask, model.layers)[0]  # noqa: E731
    got = encode_with(model, teacher, texts, batch_size=4).buckets[0]
    want = model.encode(texts, "query", show_progress=False).buckets[0]
    assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
    assert np.allclose(got.data, want.data, atol=1e-6)
