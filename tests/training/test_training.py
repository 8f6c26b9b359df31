import numpy as np
import pytest
import torch

from uhdsearch.training.data import (TrainingPair, ict_pairs, pairs_from_qrels, remove_span, split_sentences,
                                     unique_document_batches)
from uhdsearch.training.losses import distillation, hinge_in_batch
from uhdsearch.training.negatives import hard_negatives_from_rankings
from uhdsearch.recipes.teachers import DenseTeacher as Teacher
from uhdsearch.training.trainer import TrainingArgs, train
from uhdsearch.types import Document


def test_hinge_loss_by_hand():
    scores = torch.tensor([[0.9, 0.5, 0.2], [0.1, 0.3, 0.0]])  # 2 queries, third column a hard negative
    # q0: negatives 0.5, 0.2 -> max(0, 1-0.9+0.5)=0.6, 0.3 ; q1: negatives 0.1, 0.0 -> 0.8, 0.7
    assert torch.isclose(hinge_in_batch(scores), torch.tensor((0.6 + 0.3 + 0.8 + 0.7) / 4))
    assert torch.isclose(hinge_in_batch(torch.tensor([[3.0, 0.0], [0.0, 3.0]])), torch.tensor(0.0))


def test_distillation_is_zero_when_student_matches_teacher():
    t = torch.tensor([[0.9, 0.1], [0.2, 0.8]])
    assert distillation(t, t, 0.1, 0.1).abs() < 1e-6
    assert distillation(t.flip(1), t, 0.1, 0.1) > 0.1


def test_sentence_split_and_ict_pairs_remove_the_query_sentence():
    text = "Cells divide often. Mitochondria make energy for cells. The nucleus holds the genome of each cell."
    assert [text[a:b] for a, b in split_sentences(text)] == [
        "Cells divide often.", "Mitochondria make energy for cells.", "The nucleus holds the genome of each cell."]
    docs = [Document("d0", text), Document("d1", "Too short.")]
    pairs = ict_pairs(docs, per_document=2, min_words=4)
    assert len(pairs) == 2 and all(p.doc_row == 0 for p in pairs)
    for p in pairs:
        assert p.query in text and p.query not in remove_span(text, p.drop)


def test_lowercased_text_splits_into_sentences():
    # Medline in BEIR layout is lowercased with spaced full stops; before this rule it gave 120 ICT pairs.
    text = "correlation of glucose levels . coefficients were determined at delivery . the fetal level depends."
    assert [text[a:b] for a, b in split_sentences(text)] == [
        "correlation of glucose levels .", "coefficients were determined at delivery .", "the fetal level depends."]
    assert len(split_sentences("Mixed case. but not here.")) == 1


def test_pairs_from_qrels_skips_unknown_documents_and_non_relevant():
    from uhdsearch.types import Query

    pairs = pairs_from_qrels([Query("q", "a query")], {"q": {"d1": 1, "d2": 0, "zz": 1}}, {"d1": 0, "d2": 1})
    assert pairs == [TrainingPair("a query", 0)]


def test_batches_never_repeat_a_document():
    pairs = [TrainingPair(f"q{i}", i % 5) for i in range(40)]
    batches = unique_document_batches(pairs, 4, seed=1)
    used = [id(p) for b in batches for p in b]
    assert len(used) == len(set(used)) and len(used) >= 39  # a lone leftover pair has no negatives: dropped
    assert all(len(b) >= 2 for b in batches)
    assert all(len({p.doc_row for p in b}) == len(b) for b in batches)


def test_hard_negatives_avoid_positives():
    pairs = [TrainingPair("q", 0), TrainingPair("r", 3)]
    out = hard_negatives_from_rankings(pairs, {"q": [0, 1, 2], "r": [3]}, {"q": {0, 1}}, depth=3)
    assert out == [2, None]


def test_training_args_validation():
    with pytest.raises(ValueError, match="batch_size=1 must be at least 2"):
        TrainingArgs(batch_size=1)
    with pytest.raises(ValueError, match="learning_rate"):
        TrainingArgs(learning_rate=0)




@pytest.mark.parametrize("frozen", [True, False])
def test_training_lowers_the_loss_and_keeps_masks_and_frozen_weights(tiny_encoder, mini_data, frozen):
    docs = list(mini_data.corpus.values())
    rows = {d.doc_id: i for i, d in enumerate(docs)}
    pairs = pairs_from_qrels(mini_data.queries, mini_data.qrels, rows)[:16] + ict_pairs(docs[:40], 1)
    word_embeddings = tiny_encoder.backbone.model.embeddings.word_embeddings.weight.detach().clone()
    wta = tiny_encoder.buckets.wta["2"]
    before = wta.weight.detach().clone()
    args = TrainingArgs(epochs=4, batch_size=8, learning_rate=3e-3, warmup_ratio=0.0,
                        train_backbone_layers=0 if frozen else 1)
    result = train(tiny_encoder, docs, pairs, args, show_progress=False)
    assert result.steps >= 8
    assert np.mean(result.losses[-3:]) < np.mean(result.losses[:3])
    assert torch.all(wta.weight[~wta.mask] == 0)  # fixed weight sparsity survives training
    assert not torch.equal(before, wta.weight)
    assert torch.equal(word_embeddings, tiny_encoder.backbone.model.embeddings.word_embeddings.weight)
    last_layer = tiny_encoder.backbone.model.encoder.layer[-1].output.dense.weight
    assert last_layer.requires_grad == (not frozen)


def test_eval_hook_keeps_the_best_weights_and_distillation_runs(tiny_encoder, mini_data):
    docs = list(mini_data.corpus.values())
    pairs = ict_pairs(docs[:60], 1)
    calls = []

    def eval_fn(model):  # best at the first call (step 0): training must not keep later, worse weights
        calls.append(model.buckets.wta["1"].weight.detach().clone())
        return -len(calls)

    rng = np.random.default_rng(0)
    teacher = Teacher({p.query: rng.normal(size=8).astype(np.float32) for p in pairs},
                      rng.normal(size=(len(docs), 8)).astype(np.float32))
    args = TrainingArgs(epochs=2, batch_size=8, learning_rate=1e-2, eval_every=2, distill_weight=0.5)
    result = train(tiny_encoder, docs, pairs, args, teacher=teacher, eval_fn=eval_fn, show_progress=False)
    assert result.best_step == 0 and [s for s, _ in result.evals][:2] == [0, 2]
    assert torch.equal(tiny_encoder.buckets.wta["1"].weight, calls[0])
    assert not torch.equal(calls[0], calls[-1])


def test_train_rejects_bad_inputs(tiny_encoder, mini_data):
    docs = list(mini_data.corpus.values())
    with pytest.raises(ValueError, match="no training pairs"):
        train(tiny_encoder, docs, [], show_progress=False)
    with pytest.raises(ValueError, match="needs a teacher"):
        train(tiny_encoder, docs, [TrainingPair("q", 0)], TrainingArgs(distill_weight=1.0), show_progress=False)


def test_hinge_ignores_cells_marked_as_other_positives():
    scores = torch.tensor([[0.9, 0.8], [0.1, 0.3]])
    ignore = torch.tensor([[False, True], [False, False]])  # doc 1 is also relevant to query 0
    # only q1's negative (0.1) counts: max(0, 1 - 0.3 + 0.1) = 0.8
    assert torch.isclose(hinge_in_batch(scores, ignore=ignore), torch.tensor(0.8))
