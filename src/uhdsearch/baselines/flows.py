"""Normalizing flows on frozen representations (Jung et al. §4.1.1, after BERT-flow): NICE and Glow in torch.

A flow f maps a representation x to z = f(x) and is trained without labels by maximum likelihood of x under
z ~ N(0, I) (change of variables, their Eq. 5). The retrieval systems then use z instead of x.
Both models here are for vectors, not images: Glow's "1x1 convolution" is an invertible linear map of the
features and its multi-scale split factors half the features out per level under a standard normal prior
(Glow learns a conditional prior there; we keep it fixed, as a simplification).
"""
from __future__ import annotations

import abc

import logging
import math
from typing import TypeVar

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from uhdsearch.errors import UsageError

logger = logging.getLogger(__name__)

Array = TypeVar("Array", np.ndarray, torch.Tensor)
_LOG_2PI = math.log(2 * math.pi)
_DEAD = 1e-4  # a feature whose std is below this fraction of the largest std is treated as constant


def _mlp(n_in: int, n_out: int, hidden: int, n_layers: int) -> nn.Sequential:
    """n_layers linear layers with ReLU between; the last is zero-initialised so a coupling starts as identity."""
    sizes = [n_in] + [hidden] * (n_layers - 1) + [n_out]
    layers: list[nn.Module] = []
    for i in range(n_layers):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < n_layers - 1:
            layers.append(nn.ReLU())
    nn.init.zeros_(layers[-1].weight)
    nn.init.zeros_(layers[-1].bias)
    return nn.Sequential(*layers)


class Flow(nn.Module, abc.ABC):
    """An invertible map with a tractable log-determinant; subclasses define forward and inverse."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        if dim < 2:
            raise UsageError(f"dim={dim}: a coupling flow needs at least 2 features")
        self.dim = dim
        self.register_buffer("initialized", torch.tensor(False))

    @abc.abstractmethod
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z (n, dim) and log|det dz/dx| (n,)."""

    @abc.abstractmethod
    def inverse(self, z: torch.Tensor) -> torch.Tensor:
        """x (n, dim) from z."""

    def initialize(self, x: torch.Tensor) -> None:
        """Data-dependent initialisation (standardize the first batch); called once by fit."""
        self.initialized.fill_(True)

    def log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        """(n,) log p(x) = log N(f(x); 0, I) + log|det J| (Eq. 5), in nats."""
        z, logdet = self(x)
        return -0.5 * (z.pow(2).sum(dim=1) + self.dim * _LOG_2PI) + logdet

    def fit(self, X: np.ndarray | torch.Tensor, epochs: int = 10, batch_size: int = 256,
            learning_rate: float = 1e-3, seed: int = 0, show_progress: bool = True) -> list[float]:
        """Maximum-likelihood training on the rows of X (no labels).

        Jung et al. train with learning rate 1e-4 for 3-10 epochs on far more data; on a few thousand vectors
        1e-3 converges in a few epochs (token-wise NICE on 50,000 MiniLM tokens of SciFact, 3 epochs: held-out
        log-likelihood 94.6 nats with 1e-3, 17.8 with 1e-4). A fit whose last log-likelihood is below its first
        logs a warning.

        Returns:
            mean log-likelihood per row (nats) on X before training and after each epoch.
        Raises:
            ValueError: X has the wrong width or training diverged (lower the learning rate).
        """
        X = _as_tensor(X)
        if X.ndim != 2 or X.shape[1] != self.dim or X.shape[0] < 2:
            raise UsageError(f"X must be (n >= 2, {self.dim}), got {tuple(X.shape)}")
        generator = torch.Generator().manual_seed(seed)
        if not bool(self.initialized):
            with torch.no_grad():
                self.initialize(X[torch.randperm(X.shape[0], generator=generator)[:4096]])
        optimizer = torch.optim.Adam(self.parameters(), lr=learning_rate)
        history = [self.mean_log_likelihood(X)]
        for _ in tqdm(range(epochs), desc=f"fit {type(self).__name__}", disable=not show_progress, leave=False):
            self.train()
            for rows in torch.randperm(X.shape[0], generator=generator).split(batch_size):
                loss = -self.log_likelihood(X[rows]).mean() / self.dim
                if not torch.isfinite(loss):
                    raise UsageError(f"{type(self).__name__} training diverged (loss {float(loss)}); "
                                     f"lower learning_rate={learning_rate}")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(self.parameters(), 1.0)
                optimizer.step()
            history.append(self.mean_log_likelihood(X))
        if history[-1] < history[0]:
            logger.warning("%s training lowered the mean log-likelihood from %.1f to %.1f nats: it diverged; "
                           "lower learning_rate=%g", type(self).__name__, history[0], history[-1], learning_rate)
        self.eval()
        return history

    @torch.no_grad()
    def mean_log_likelihood(self, X: np.ndarray | torch.Tensor, batch_size: int = 4096) -> float:
        """Mean log p(x) per row of X, in nats."""
        X = _as_tensor(X)
        self.eval()
        total = sum(float(self.log_likelihood(X[i : i + batch_size]).sum()) for i in range(0, X.shape[0], batch_size))
        return total / X.shape[0]

    @torch.no_grad()
    def transform(self, X: Array, batch_size: int = 8192) -> Array:
        """z = f(X) row by row, (n, dim) float32, same type as X."""
        is_numpy = not isinstance(X, torch.Tensor)
        T = _as_tensor(X)
        if T.shape[-1] != self.dim:
            raise UsageError(f"X has width {T.shape[-1]} but this flow has dim {self.dim}")
        self.eval()
        Z = torch.cat([self(T[i : i + batch_size])[0] for i in range(0, T.shape[0], batch_size)]) if T.shape[0] \
            else T.clone()
        return Z.numpy() if is_numpy else Z


def _as_tensor(X) -> torch.Tensor:
    return X.detach().float() if isinstance(X, torch.Tensor) else torch.from_numpy(np.asarray(X, dtype=np.float32))


def _floored_std(x: torch.Tensor) -> torch.Tensor:
    """Per-feature std, at least `_DEAD` of the largest (numerically constant features are not blown up)."""
    std = x.std(dim=0)
    return std.clamp_min(max(_DEAD * float(std.max()), 1e-30))


class _Affine(nn.Module):
    """Per-feature y = (x + bias) * exp(log_scale); data-initialised to zero mean, unit variance (ActNorm).

    The std is floored as in _Standardize, so a dead feature does not start with a gain of 1e6.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(dim))
        self.log_scale = nn.Parameter(torch.zeros(dim))

    def initialize(self, x: torch.Tensor) -> None:
        self.bias.copy_(-x.mean(dim=0))
        self.log_scale.copy_(-torch.log(_floored_std(x)))

    def forward(self, x):
        return (x + self.bias) * self.log_scale.exp(), self.log_scale.sum().expand(x.shape[0])

    def inverse(self, y):
        return y * (-self.log_scale).exp() - self.bias


class _Standardize(nn.Module):
    """Fixed per-feature y = (x - mean) / std from the fit data: preprocessing, not trained (a buffer).

    Features whose spread is below `_DEAD` of the largest one are numerically constant (all-MiniLM-L6-v2's last
    layer has three such features: LayerNorm gains of 5e-33): their std is floored there, so they map to ~0
    instead of being multiplied by 1e6 or more.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("log_std", torch.zeros(dim))

    def initialize(self, x: torch.Tensor) -> None:
        self.mean.copy_(x.mean(dim=0))
        self.log_std.copy_(torch.log(_floored_std(x)))

    def forward(self, x):
        return (x - self.mean) * (-self.log_std).exp(), (-self.log_std.sum()).expand(x.shape[0])

    def inverse(self, y):
        return y * self.log_std.exp() + self.mean


class NICE(Flow):
    """NICE (Dinh et al. 2014): additive coupling layers over alternating feature halves, then a diagonal scaling.

    Jung et al. use a five-layer network of 1000 units per coupling; that is the default here. The input is
    first standardized per feature with statistics of the fit data (fixed, like Dinh et al.'s preprocessing
    of their image data; its constant log-det is part of the likelihood). The final scaling, NICE's
    diagonal S with a shift added, starts as the identity and is trained.

    Why the standardization comes first: additive couplings are volume-preserving, so only the final scaling
    can fix each feature's spread. Data-initialising that scaling to unit variance gives a feature that is
    constant in the data (a dead backbone unit) a gain of 1e6, and every coupling's output on that feature
    is multiplied by it: after one optimizer step it dominates z, the log-likelihood falls from -19 to
    -380,000 nats and cosine ranking with token-wise NICE collapses (SciFact sum-of-max+nice: 0.19 nDCG@10).
    """

    def __init__(self, dim: int, n_couplings: int = 4, hidden: int = 1000, n_layers: int = 5, seed: int = 0) -> None:
        super().__init__(dim)
        torch.manual_seed(seed)
        self.half = dim // 2
        self.standardize = _Standardize(dim)
        self.couplings = nn.ModuleList(
            _mlp(self.half if i % 2 == 0 else dim - self.half, dim - self.half if i % 2 == 0 else self.half,
                 hidden, n_layers) for i in range(n_couplings))
        self.scaling = _Affine(dim)

    def _parts(self, x, i):
        a, b = x[:, : self.half], x[:, self.half :]
        return (a, b) if i % 2 == 0 else (b, a)  # (conditioning, updated)

    def _join(self, cond, upd, i):
        return torch.cat([cond, upd], dim=1) if i % 2 == 0 else torch.cat([upd, cond], dim=1)

    def initialize(self, x):
        self.standardize.initialize(x)
        super().initialize(x)

    def forward(self, x):
        x, logdet = self.standardize(x)
        for i, net in enumerate(self.couplings):  # additive couplings have log-det 0
            cond, upd = self._parts(x, i)
            x = self._join(cond, upd + net(cond), i)
        z, scaling_logdet = self.scaling(x)
        return z, logdet + scaling_logdet

    def inverse(self, z):
        x = self.scaling.inverse(z)
        for i in reversed(range(len(self.couplings))):
            cond, upd = self._parts(x, i)
            x = self._join(cond, upd - self.couplings[i](cond), i)
        return self.standardize.inverse(x)


class _InvertibleLinear(nn.Module):
    """Glow's invertible 1x1 convolution for vectors: y = x W^T, W initialised to a random rotation."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linalg.qr(torch.randn(dim, dim))[0])

    def forward(self, x):
        return x @ self.weight.t(), torch.linalg.slogdet(self.weight)[1].expand(x.shape[0])

    def inverse(self, y):
        return torch.linalg.solve(self.weight, y.t()).t()


class _AffineCoupling(nn.Module):
    """Glow's affine coupling: the second half becomes (x_b + t) * sigmoid(s + 2), (s, t) from the first half."""

    def __init__(self, dim: int, hidden: int, n_layers: int) -> None:
        super().__init__()
        self.half = dim // 2
        self.net = _mlp(self.half, 2 * (dim - self.half), hidden, n_layers)

    def _scale_shift(self, a):
        s, t = self.net(a).chunk(2, dim=1)
        return torch.sigmoid(s + 2.0), t

    def forward(self, x):
        a, b = x[:, : self.half], x[:, self.half :]
        scale, shift = self._scale_shift(a)
        return torch.cat([a, (b + shift) * scale], dim=1), scale.log().sum(dim=1)

    def inverse(self, y):
        a, b = y[:, : self.half], y[:, self.half :]
        scale, shift = self._scale_shift(a)
        return torch.cat([a, b / scale - shift], dim=1)


class Glow(Flow):
    """Glow (Kingma & Dhariwal 2018) for vectors: levels of `depth` steps (ActNorm, invertible linear, affine
    coupling); after each level but the last, half of the features leave the flow as part of z.

    Jung et al. follow BERT-flow with two levels and depth three, the defaults here.
    """

    def __init__(self, dim: int, n_levels: int = 2, depth: int = 3, hidden: int = 512, n_layers: int = 3,
                 seed: int = 0) -> None:
        super().__init__(dim)
        if n_levels < 1 or depth < 1:
            raise UsageError(f"n_levels={n_levels} and depth={depth} must be >= 1")
        torch.manual_seed(seed)
        self.widths = []
        width = dim
        for level in range(n_levels):
            if width < 2:
                raise UsageError(f"dim={dim} is too small for {n_levels} levels")
            self.widths.append(width)
            width -= width // 2 if level < n_levels - 1 else 0
        self.levels = nn.ModuleList(
            nn.ModuleList(nn.ModuleList([_Affine(w), _InvertibleLinear(w), _AffineCoupling(w, hidden, n_layers)])
                          for _ in range(depth)) for w in self.widths)

    def initialize(self, x):
        for level, width in zip(self.levels, self.widths):
            for actnorm, linear, coupling in level:
                actnorm.initialize(x)
                x = coupling(linear(actnorm(x)[0])[0])[0]
            x = x[:, width // 2 :]
        super().initialize(x)

    def forward(self, x):
        logdet = torch.zeros(x.shape[0])
        factored = []
        for i, level in enumerate(self.levels):
            for step in level:
                for layer in step:
                    x, ld = layer(x)
                    logdet = logdet + ld
            if i < len(self.levels) - 1:
                half = x.shape[1] // 2
                factored.append(x[:, :half])
                x = x[:, half:]
        return torch.cat(factored + [x], dim=1), logdet

    def inverse(self, z):
        splits = [w // 2 for w in self.widths[:-1]]
        factored, start = [], 0
        for s in splits:
            factored.append(z[:, start : start + s])
            start += s
        x = z[:, start:]
        for i in reversed(range(len(self.levels))):
            if i < len(self.levels) - 1:
                x = torch.cat([factored[i], x], dim=1)
            for step in reversed(self.levels[i]):
                for layer in reversed(step):
                    x = layer.inverse(x)
        return x
