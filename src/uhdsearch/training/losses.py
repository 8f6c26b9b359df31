"""Losses over a (n_queries, n_docs) score matrix whose diagonal holds the positives. No optimizer, no I/O."""
from __future__ import annotations

import torch

from uhdsearch.training.binary import relax, scale_rows


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


def infonce(scores: torch.Tensor, temperature: float = 0.05, ignore: torch.Tensor | None = None) -> torch.Tensor:
    """In-batch InfoNCE: mean over queries of -log softmax(scores / temperature)[i, i].

    Args:
        scores: (n, n + n_extra) as in `hinge_in_batch` (column i is query i's positive).
        ignore: optional (n, n + n_extra) bool; True cells (other positives of the query) leave the softmax.
    """
    n = scores.shape[0]
    logits = scores / temperature
    if ignore is not None:
        ignore = ignore.clone()
        ignore[torch.arange(n), torch.arange(n)] = False
        logits = logits.masked_fill(ignore, float("-inf"))
    return torch.nn.functional.cross_entropy(logits, torch.arange(n, device=scores.device))


def margin_mse(student_positive: torch.Tensor, student_negative: torch.Tensor, teacher_positive: torch.Tensor,
               teacher_negative: torch.Tensor) -> torch.Tensor:
    """MarginMSE (Hofstätter et al. 2020): mean of ((s+ - s-) - (t+ - t-))^2 over (query, positive, negative).

    All arguments (n_triples,); teacher margins are targets (no gradient flows into them).
    """
    target = (teacher_positive - teacher_negative).detach()
    return ((student_positive - student_negative - target) ** 2).mean()


def flops(vectors: torch.Tensor) -> torch.Tensor:
    """FLOPS regulariser (Paria et al. 2020; SPLADE): sum over dims of the squared mean |activation| over the batch.

    The scalar is the expected number of multiply-adds of a sparse dot product up to scale, so it penalises
    the dimensions that many texts share the most.

    Args:
        vectors: (n_texts, dim).
    """
    return (vectors.abs().mean(dim=0) ** 2).sum()


def document_frequency_penalty(vectors: torch.Tensor, tau: float) -> torch.Tensor:
    """Sum over dims of the squared (relaxed) share of texts each dimension hits: FLOPS on tanh(x / tau).

    For 0/1 vectors (tau -> 0) this is sum_j df_j^2 with df_j the batch document frequency of dim j, the
    expected cost of a binary inverted-index search; `vectors` are non-negative pooled buckets.
    """
    return flops(relax(scale_rows(vectors), tau))
