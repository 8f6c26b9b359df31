"""Losses over a (n_queries, n_docs) score matrix whose diagonal holds the positives. No optimizer, no I/O."""
from __future__ import annotations

import torch


def hinge_in_batch(scores: torch.Tensor, margin: float = 1.0, ignore: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 8: mean over (q, d-) of max(0, margin - rel(q, d+) + rel(q, d-)), other columns being negatives.

    Args:
        scores: (n, n + n_extra) relevance; column i is query i's positive; the rest (other queries'
            positives and any hard negatives appended after column n) are its negatives.
        ignore: optional (n, n + n_extra) bool; True cells are not negatives (another positive of the query).
    """
    n = scores.shape[0]
    positives = scores[torch.arange(n), torch.arange(n)].unsqueeze(1)
    losses = (margin - positives + scores).clamp_min(0)
    negative = torch.ones_like(scores, dtype=torch.bool)
    negative[torch.arange(n), torch.arange(n)] = False
    if ignore is not None:
        negative &= ~ignore
    return losses[negative].mean()


def distillation(student: torch.Tensor, teacher: torch.Tensor, student_temperature: float,
                 teacher_temperature: float) -> torch.Tensor:
    """KL(teacher || student) between the row-wise softmax score distributions (in-batch listwise distillation)."""
    target = torch.softmax(teacher / teacher_temperature, dim=1)
    log_pred = torch.log_softmax(student / student_temperature, dim=1)
    return torch.nn.functional.kl_div(log_pred, target, reduction="batchmean")
