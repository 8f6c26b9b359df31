"""Binary-aware scoring for training: the deployed UHD-binary score counts matched active dimensions (§3.7).

Pooled bucket vectors are non-negative (pooling.max_pool_winners): a dimension is active iff its value is > 0.
Two ways to train through the count:
- `binarize_ste`: forward is the exact 0/1 vector; backward is the gradient of a relaxation (straight-through).
- `relax`: tanh(x / tau) = 2 sigmoid(2x / tau) - 1, a smooth indicator that is 0 at 0 (a plain sigmoid(x / tau)
  would give inactive dimensions 0.5) and tends to the 0/1 vector as tau -> 0; anneal tau with `annealed_tau`.
No optimizer, no model code.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch

from uhdsearch.errors import UsageError

Estimator = Literal["ste", "relaxed"]


def relax(x: torch.Tensor, tau: float) -> torch.Tensor:
    """Smooth activity indicator of non-negative `x`: tanh(x / tau), in [0, 1); exact 0 where x == 0."""
    if tau <= 0:
        raise UsageError(f"tau={tau} must be positive")
    return torch.tanh(x / tau)


def binarize_ste(x: torch.Tensor, tau: float | None = None) -> torch.Tensor:
    """(x > 0) as float in the forward pass; the backward pass is that of `relax(x, tau)`.

    tau=None: the backward pass is the identity on active dimensions (and zero elsewhere).
    The forward value is exactly the 0/1 vector: hard + (soft - soft) adds an exact zero.
    """
    hard = (x > 0).to(x.dtype)
    soft = x * hard if tau is None else relax(x, tau)
    return hard + (soft - soft.detach())


def binary_overlap(queries: torch.Tensor, documents: torch.Tensor, tau: float | None = None,
                   estimator: Estimator = "ste") -> torch.Tensor:
    """(n_queries, n_docs) matched active dimensions of one bucket (exact in the forward pass with "ste").

    Args:
        queries: (n_queries, dim) non-negative pooled vectors; documents: (n_docs, dim) likewise.
        tau: relaxation temperature relative to each row's largest value (rows are divided by their detached
            max first, so one tau suits short and long texts); None with "ste" = identity on active dims.
        estimator: "ste" (exact forward) or "relaxed" (tanh forward; needs tau).
    """
    if estimator == "relaxed":
        if tau is None:
            raise UsageError("the relaxed estimator needs a tau")
        return relax(scale_rows(queries), tau) @ relax(scale_rows(documents), tau).t()
    if estimator != "ste":
        raise UsageError(f"estimator={estimator!r}; choose 'ste' or 'relaxed'")
    return binarize_ste(scale_rows(queries), tau) @ binarize_ste(scale_rows(documents), tau).t()


def binary_relevance(queries: Sequence[torch.Tensor], documents: Sequence[torch.Tensor], weights: Sequence[float],
                     tau: float | None = None, estimator: Estimator = "ste") -> torch.Tensor:
    """Eq. 7 on binarized buckets, divided by each query's active count (detached) so scores lie in [0, 1].

    The division is a per-query constant: it keeps every query's ranking identical to the deployed count
    while giving losses (margins, temperatures) a scale like that of cosine scores.
    """
    total = sum(w * binary_overlap(q, d, tau, estimator) for w, q, d in zip(weights, queries, documents))
    active = sum(w * (q > 0).sum(dim=1) for w, q in zip(weights, queries)).to(total.dtype)
    return total / active.clamp_min(1.0).unsqueeze(1)


def annealed_tau(step: int, total_steps: int, tau_start: float, tau_end: float | None) -> float:
    """Geometric schedule from tau_start (step 0) to tau_end (last step); constant when tau_end is None."""
    if tau_end is None or total_steps <= 1:
        return tau_start
    share = min(1.0, max(0.0, step / (total_steps - 1)))
    return math.exp((1 - share) * math.log(tau_start) + share * math.log(tau_end))


def scale_rows(x: torch.Tensor) -> torch.Tensor:
    """Each row divided by its (detached) largest value, so a relaxation's tau means the same for every text."""
    return x / x.detach().amax(dim=1, keepdim=True).clamp_min(1e-12)
