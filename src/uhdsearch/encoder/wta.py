"""Winner-Take-All layer (paper §3.3): linear h -> dim, keep the top wta_k per token. Does not pool."""
from __future__ import annotations

import math

import torch
from torch import nn

from uhdsearch.encoder.precision import cast_for_product, wta_path, wta_scores
from uhdsearch.encoder.winners import top_winners
from uhdsearch.errors import UsageError


class _WinnersOnly(torch.autograd.Function):
    """z = x W^T + b, then top-k per row. Backward touches only the winners (§3.3), as sparse products.

    The product is encoder/precision.py's: bfloat16 numbers on every CPU, native or emulated in float32.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, mask, k: int, dtype: torch.dtype, cast=None):
        if cast is None:
            cast = (cast_for_product(weight.detach(), dtype), cast_for_product(bias.detach(), dtype))
        z, round_later = wta_scores(x, cast[0], cast[1], dtype)
        if z.device.type == "cpu":  # one tie rule for documents and queries, ~2x faster than torch.topk
            values, indices = top_winners(z, k, round_bfloat16=round_later)
        else:
            values, indices = torch.topk(z, k, dim=1, sorted=False)
            values = values.float()
        ctx.save_for_backward(x, weight, mask, indices)
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, _grad_indices):
        x, weight, mask, indices = ctx.saved_tensors
        n, k = indices.shape
        rows = torch.arange(n, device=x.device).repeat_interleave(k)
        grad_z = torch.sparse_coo_tensor(
            torch.stack([rows, indices.reshape(-1)]), grad_values.reshape(-1), (n, weight.shape[0]), check_invariants=False
        ).coalesce()
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.sparse.mm(grad_z, weight)
        if ctx.needs_input_grad[1]:
            # Fixed weight sparsity: masked weights never receive a gradient.
            grad_w = torch.sparse.mm(grad_z.t(), x) * mask
        if ctx.needs_input_grad[2]:
            grad_b = torch.zeros(weight.shape[0], dtype=grad_values.dtype, device=x.device)
            grad_b.index_add_(0, indices.reshape(-1), grad_values.reshape(-1))
        return grad_x, grad_w, grad_b, None, None, None, None


class WTALayer(nn.Module):
    """One bucket's WTA projection with a fixed weight-sparsity mask (Ahmad & Scheinkman, 2019).

    weight: (dim, hidden) float32, zero wherever mask is False; mask: (dim, hidden) bool.
    """

    def __init__(self, hidden: int, dim: int, weight_sparsity: float = 0.7, seed: int = 0,
                 initialize: bool = True) -> None:
        super().__init__()
        if not initialize:  # weights come from a file next (from_pretrained): skip the random draws
            self.weight = nn.Parameter(torch.zeros(dim, hidden))
            self.bias = nn.Parameter(torch.zeros(dim))
            self.register_buffer("mask", torch.zeros(dim, hidden, dtype=torch.bool), persistent=True)
            return
        generator = torch.Generator().manual_seed(seed)
        n_zero = int(round(weight_sparsity * hidden))
        # Each output unit keeps exactly hidden - n_zero randomly chosen inputs.
        ranks = torch.rand(dim, hidden, generator=generator).argsort(dim=1).argsort(dim=1)
        mask = ranks >= n_zero
        fan_in = max(hidden - n_zero, 1)
        weight = torch.randn(dim, hidden, generator=generator) / math.sqrt(fan_in)
        self.weight = nn.Parameter(weight * mask)
        self.bias = nn.Parameter(torch.zeros(dim))
        self.register_buffer("mask", mask, persistent=True)

    @property
    def dim(self) -> int:
        return int(self.weight.shape[0])

    def forward(
        self, tokens: torch.Tensor, wta_k: int, dtype: torch.dtype = torch.float32
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Winners of each token.

        Args:
            tokens: (n_tokens, hidden) float32 states of non-padding tokens.
            wta_k: winners kept per token.
            dtype: the projection's numbers (bfloat16: encoder/precision.py picks how this CPU computes them).
        Returns:
            values (n_tokens, wta_k) float32 and indices (n_tokens, wta_k) int64.
        """
        if not 0 < wta_k <= self.dim:
            raise UsageError(f"wta_k={wta_k} must satisfy 0 < wta_k <= dim ({self.dim})")
        return _WinnersOnly.apply(tokens, self.weight, self.bias, self.mask, wta_k, dtype, self.cast_weight(dtype))

    def cast_weight(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The weight and bias as the product takes them (precision.cast_for_product), cached while they cannot
        change (no autograd); None where the product takes them as they are (same dtype, or training them).

        Casting an 81,920 x 384 matrix costs ~90 ms, ten times the projection of a 32-token query.
        """
        if dtype == self.weight.dtype or (torch.is_grad_enabled() and self.weight.requires_grad):
            return None
        key = (self.weight.data_ptr(), self.weight._version, self.bias.data_ptr(), self.bias._version, dtype,
               wta_path())
        if getattr(self, "_cast_key", None) != key:
            with torch.no_grad():
                # Stored transposed, (hidden, dim) contiguous, viewed back as (dim, hidden): the product
                # x @ W^T then streams W row-major, ~15 % faster for a query's few tokens.
                weight = cast_for_product(self.weight.detach(), dtype)
                self._cast = (weight.t().contiguous().t(), cast_for_product(self.bias.detach(), dtype))
            self._cast_key = key
        return self._cast

    def center_(self, mean: torch.Tensor) -> None:
        """Set the bias so that the mean input state projects to zero: b = -W mean.

        Backbone token states are anisotropic (they share a large common direction), so with zero bias the
        units aligned with that direction win for almost every token and become "stop dimensions" active
        in nearly every document. Centering removes that shared component (a data-dependent initialisation).
        """
        with torch.no_grad():
            self.bias.copy_(-(self.weight @ mean.float()))

    def apply_mask_(self) -> None:
        """Zero the masked weights (after loading weights from elsewhere)."""
        with torch.no_grad():
            self.weight.mul_(self.mask)
