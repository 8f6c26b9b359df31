"""Whitening (Jung et al. Eq. 7-10, after Su et al. 2021) and the two isotropy metrics of Jung et al. §3.2.

Whitening maps representations to zero mean and identity covariance; isotropy(W) (Eq. 3, Mu et al. 2017)
and average_cosine(W) (Eq. 4) measure how far a set of vectors is from a direction-uniform spread.
`pooled_embedder` turns a token-wise or sequence-wise transform into a dense text embedder.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from uhdsearch.baselines.dual_encoder import mean_tokens
from uhdsearch.errors import UsageError

Array = TypeVar("Array", np.ndarray, torch.Tensor)
Transform = Callable[[torch.Tensor], torch.Tensor]


def _as_matrix(W, name: str = "W") -> np.ndarray:
    W = W.detach().cpu().numpy() if isinstance(W, torch.Tensor) else np.asarray(W)
    if W.ndim != 2 or W.shape[0] < 2:
        raise UsageError(f"{name} must be a 2-D array of at least 2 row vectors, got shape {W.shape}")
    return W.astype(np.float64)


def isotropy(W: np.ndarray | torch.Tensor) -> float:
    """I(W) of Jung et al. Eq. 3: min over max of the partition function Z(c) = sum_i exp(c . w_i).

    c ranges over the eigenvectors of W^T W. 1 means isotropic (a standard Gaussian sample comes close);
    values near 0 mean a few directions dominate. Computed in log space (logsumexp) so large norms do not overflow.

    Args:
        W: (n, dim) representations, one per row.
    Examples:
        >>> isotropy(np.random.default_rng(0).standard_normal((20000, 8))) > 0.9
        True
        >>> isotropy(np.random.default_rng(0).standard_normal((20000, 8)) + 3.0) < 0.001  # a shifted cloud
        True
    """
    W = _as_matrix(W)
    _, eigenvectors = np.linalg.eigh(W.T @ W)
    projections = W @ eigenvectors  # (n, dim): c . w_i for each eigenvector c
    peak = projections.max(axis=0)
    log_z = peak + np.log(np.exp(projections - peak).sum(axis=0))
    return float(np.exp(log_z.min() - log_z.max()))


def average_cosine(W: np.ndarray | torch.Tensor) -> float:
    """Eq. 4 of Jung et al.: the mean cosine similarity over all pairs of distinct rows of W (0 when isotropic).

    Uses |sum_i u_i|^2 = n + sum_{i != j} cos(w_i, w_j) for unit rows u_i, so it is O(n dim).
    Zero rows are left out.

    Examples:
        >>> round(average_cosine(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])), 4)  # (0 + 2 cos 45°) / 3
        0.4714
    """
    W = _as_matrix(W)
    norms = np.linalg.norm(W, axis=1)
    units = W[norms > 0] / norms[norms > 0, None]
    n = units.shape[0]
    if n < 2:
        raise UsageError("average_cosine needs at least 2 non-zero rows")
    total = units.sum(axis=0)
    return float((total @ total - n) / (n * (n - 1)))


@dataclass
class Whitening:
    """x -> (x - mu) U Lambda^(-1/2) (Eq. 10), with mu, Sigma = U Lambda U^T from the fit data (Eq. 7-9).

    Attributes:
        mean: (hidden,) float32.
        matrix: (hidden, dim) float32, dim <= hidden (columns in order of decreasing variance).
    Examples:
        >>> X = np.random.default_rng(0).standard_normal((500, 4)) @ np.diag([5.0, 1.0, 0.2, 3.0])
        >>> Z = Whitening.fit(X).transform(X)
        >>> bool(np.allclose(np.cov(Z, rowvar=False), np.eye(4), atol=1e-4))
        True
    """

    mean: np.ndarray
    matrix: np.ndarray

    @classmethod
    def fit(cls, X: np.ndarray | torch.Tensor, dim: int | None = None, epsilon: float = 1e-8) -> Whitening:
        """Estimate mean and unbiased covariance of the rows of X; keep the `dim` highest-variance directions.

        Args:
            X: (n, hidden) representations (n >= 2).
            dim: output width (Su et al.'s dimension cut); None keeps all `hidden`.
            epsilon: floor on eigenvalues so a rank-deficient X does not divide by zero.
        Raises:
            ValueError: X is not 2-D with 2+ rows, or dim is out of range.
        """
        X = _as_matrix(X, "X")
        hidden = X.shape[1]
        if dim is not None and not 0 < dim <= hidden:
            raise UsageError(f"dim={dim} must satisfy 0 < dim <= {hidden} (the input width)")
        mean = X.mean(axis=0)
        covariance = np.cov(X - mean, rowvar=False)  # Eq. 8: unbiased (n - 1)
        U, S, _ = np.linalg.svd(covariance)  # Eq. 9: S descending, U orthogonal
        matrix = U / np.sqrt(np.maximum(S, epsilon))
        return cls(mean.astype(np.float32), matrix[:, : dim or hidden].astype(np.float32))

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def transform(self, X: Array) -> Array:
        """Whitened rows, (n, dim), same type as X (numpy or torch float32)."""
        if X.shape[-1] != self.mean.shape[0]:
            raise UsageError(f"X has width {X.shape[-1]} but this whitening was fit on width {self.mean.shape[0]}")
        if isinstance(X, torch.Tensor):
            return (X.float() - torch.from_numpy(self.mean)) @ torch.from_numpy(self.matrix)
        return ((np.asarray(X, dtype=np.float32) - self.mean) @ self.matrix).astype(np.float32)

    __call__ = transform


def pooled_embedder(token_transform: Transform | None = None, sequence_transform: Transform | None = None,
                    normalize: bool = True):
    """A text embedder for DualEncoder: tokens -> token_transform -> mean -> sequence_transform -> unit length.

    Token-wise post-processing passes `token_transform`, sequence-wise `sequence_transform` (Jung et al. §4.1);
    neither gives the plain mean-pooled cosine baseline.
    """
    def embed(tokens: torch.Tensor, token_text: torch.Tensor, n_texts: int) -> torch.Tensor:
        if token_transform is not None:
            tokens = token_transform(tokens)
        vectors = mean_tokens(tokens, token_text, n_texts)
        if sequence_transform is not None:
            vectors = sequence_transform(vectors)
        return torch.nn.functional.normalize(vectors, dim=1) if normalize else vectors

    return embed


def sample_tokens(tokens: torch.Tensor, n: int | None, seed: int = 0) -> torch.Tensor:
    """Up to n rows of `tokens` drawn without replacement (token-wise fits on a large corpus), float32."""
    if n is None or tokens.shape[0] <= n:
        return tokens.float()
    rows = np.sort(np.random.default_rng(seed).choice(tokens.shape[0], n, replace=False))
    return tokens[torch.from_numpy(rows)].float()

