"""Each loss against a hand computation on a 2-3 example batch."""
from __future__ import annotations

import math

import torch

from uhdsearch.training.losses import (distillation, document_frequency_penalty, flops, hinge_in_batch, infonce,
                                       margin_mse)


def test_infonce_by_hand():
    scores = torch.tensor([[0.9, 0.5], [0.1, 0.3]])
    # temperature 0.5: logits [[1.8, 1.0], [0.2, 0.6]]; -log softmax of the diagonal = log(1 + e^(neg - pos))
    expected = (math.log(1 + math.exp(-0.8)) + math.log(1 + math.exp(-0.4))) / 2
    assert math.isclose(float(infonce(scores, 0.5)), expected, rel_tol=1e-6)


def test_infonce_ignores_other_positives_but_never_the_diagonal():
    scores = torch.tensor([[0.9, 0.5, 0.7], [0.1, 0.3, 0.2]])  # third column: a hard negative
    ignore = torch.tensor([[True, True, False], [False, False, False]])  # q0: doc 1 is another positive
    # q0 keeps its positive (0.9) and the hard negative (0.7); q1 sees all three columns
    q0 = -math.log(math.exp(0.9 / 0.5) / (math.exp(0.9 / 0.5) + math.exp(0.7 / 0.5)))
    q1 = -math.log(math.exp(0.3 / 0.5) / sum(math.exp(v / 0.5) for v in (0.1, 0.3, 0.2)))
    assert math.isclose(float(infonce(scores, 0.5, ignore)), (q0 + q1) / 2, rel_tol=1e-6)


def test_listwise_kl_by_hand():
    student = torch.tensor([[1.0, 0.0, 0.5]])
    teacher = torch.tensor([[0.0, 1.0, 0.5]])
    p_t = [math.exp(v) / sum(math.exp(x) for x in (0.0, 1.0, 0.5)) for v in (0.0, 1.0, 0.5)]
    # student temperature 0.5 doubles its logits
    z = sum(math.exp(x / 0.5) for x in (1.0, 0.0, 0.5))
    log_p_s = [v / 0.5 - math.log(z) for v in (1.0, 0.0, 0.5)]
    expected = sum(p * (math.log(p) - lq) for p, lq in zip(p_t, log_p_s))
    assert math.isclose(float(distillation(student, teacher, 0.5, 1.0)), expected, rel_tol=1e-6)


def test_margin_mse_by_hand():
    s_pos, s_neg = torch.tensor([0.8, 0.6]), torch.tensor([0.3, 0.7])
    t_pos, t_neg = torch.tensor([2.0, 1.0]), torch.tensor([1.0, 1.5])
    # ((0.5 - 1.0)^2 + (-0.1 - -0.5)^2) / 2 = (0.25 + 0.16) / 2
    assert math.isclose(float(margin_mse(s_pos, s_neg, t_pos, t_neg)), 0.205, rel_tol=1e-6)


def test_margin_mse_does_not_train_the_teacher():
    t_pos = torch.tensor([2.0], requires_grad=True)
    s_pos = torch.tensor([0.0], requires_grad=True)
    margin_mse(s_pos, torch.tensor([0.0]), t_pos, torch.tensor([0.0])).backward()
    assert t_pos.grad is None and float(s_pos.grad) == -4.0  # d/ds (s - 2)^2 at 0


def test_flops_by_hand():
    vectors = torch.tensor([[1.0, 0.0, -2.0], [3.0, 0.0, 0.0]])
    # mean |x| per dim: [2, 0, 1] -> 4 + 0 + 1
    assert float(flops(vectors)) == 5.0


def test_document_frequency_penalty_by_hand():
    vectors = torch.tensor([[0.5, 0.0, 1.0], [2.0, 0.0, 0.0]])  # rows scaled to max 1: [[.5, 0, 1], [1, 0, 0]]
    # tau -> 0: 0/1 indicators, df = [1, 0, 0.5] -> 1 + 0.25
    assert math.isclose(float(document_frequency_penalty(vectors, 1e-4)), 1.25, rel_tol=1e-6)
    df0 = (math.tanh(0.5) + math.tanh(1.0)) / 2
    df2 = math.tanh(1.0) / 2
    assert math.isclose(float(document_frequency_penalty(vectors, 1.0)), df0 ** 2 + df2 ** 2, rel_tol=1e-6)


def test_hinge_by_hand_three_queries_with_a_hard_negative():
    scores = torch.tensor([[0.9, 0.2, 0.1, 0.95], [0.0, 0.5, 0.4, 0.0], [0.3, 0.3, 0.3, 0.3]])
    # margin 0.2: q0 negatives (0.2, 0.1, 0.95) -> 0, 0, 0.25; q1 (0, 0.4, 0) -> 0, 0.1, 0; q2 (0.3 x3) -> 0.2 x3
    assert math.isclose(float(hinge_in_batch(scores, 0.2)), (0.25 + 0.1 + 0.6) / 9, rel_tol=1e-6)
