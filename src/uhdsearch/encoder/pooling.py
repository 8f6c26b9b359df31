"""Masked max-pool of sparse token winners over tokens, then L2 norm (paper Eq. 4). No parameters."""
from __future__ import annotations

import torch


def max_pool_winners(
    values: torch.Tensor, indices: torch.Tensor, token_text: torch.Tensor, n_texts: int, dim: int
) -> torch.Tensor:
    """Max over each text's tokens of their sparse WTA outputs.

    Non-winning dimensions count as 0 (Eq. 3), so the pool starts from zeros and the result
    is non-negative: a dimension is active iff some token made it a positive winner.

    Args:
        values: (n_tokens, wta_k) float32 winner activations.
        indices: (n_tokens, wta_k) int64 winner dimensions.
        token_text: (n_tokens,) int64, which text each token belongs to (padding already removed).
        n_texts: number of texts in the batch.
        dim: the bucket's dimensionality.
    Returns:
        (n_texts, dim) float32.

    Examples:
        >>> values, indices = torch.tensor([[0.5, 0.2], [0.9, 0.1]]), torch.tensor([[3, 1], [3, 0]])
        >>> max_pool_winners(values, indices, torch.tensor([0, 0]), n_texts=1, dim=4)
        tensor([[0.1000, 0.2000, 0.0000, 0.9000]])
    """
    flat = (token_text.unsqueeze(1) * dim + indices).reshape(-1)
    pooled = torch.zeros(n_texts * dim, dtype=values.dtype, device=values.device)
    pooled = pooled.scatter_reduce(0, flat, values.reshape(-1), reduce="amax", include_self=True)
    return pooled.view(n_texts, dim)


def l2_normalize(vectors: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit L2 norm; all-zero rows stay zero."""
    norms = vectors.norm(dim=1, keepdim=True)
    return vectors / norms.clamp_min(1e-12)
