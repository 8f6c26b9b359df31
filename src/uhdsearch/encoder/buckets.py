"""One WTA layer per chosen backbone layer; returns per-bucket pooled sparse vectors. Never scores documents."""
from __future__ import annotations

import torch
from torch import nn

from uhdsearch.encoder.pooling import l2_normalize, max_pool_winners
from uhdsearch.encoder.winners import pooled_csr
from uhdsearch.encoder.wta import WTALayer


class Buckets(nn.Module):
    """WTA layers keyed by absolute backbone layer ("2", "4", "6")."""

    def __init__(self, layers: list[int], hidden: int, dim: int, weight_sparsity: float, seed: int,
                 initialize: bool = True) -> None:
        super().__init__()
        self.layers = list(layers)
        self.wta = nn.ModuleDict(
            {str(layer): WTALayer(hidden, dim, weight_sparsity, seed=seed + i, initialize=initialize)
             for i, layer in enumerate(layers)}
        )

    def forward(
        self, tokens: list[torch.Tensor], token_text: torch.Tensor, n_texts: int, wta_k: int,
        dtype: torch.dtype = torch.float32,
    ) -> list[torch.Tensor]:
        """Pooled, L2-normalised bucket vectors.

        Args:
            tokens: per bucket layer, (n_tokens, hidden) states of non-padding tokens only, so padding
                never competes in the max-pool.
            token_text: (n_tokens,) int64, which text each token belongs to.
        Returns:
            per bucket, (n_texts, dim) float32 with unit or zero rows.
        """
        out = []
        for layer, states in zip(self.layers, tokens):
            wta = self.wta[str(layer)]
            values, indices = wta(states, wta_k, dtype)
            out.append(l2_normalize(max_pool_winners(values, indices, token_text, n_texts, wta.dim)))
        return out

    def sparse(self, tokens: list[torch.Tensor], token_text: torch.Tensor, n_texts: int, wta_k: int,
               dtype: torch.dtype = torch.float32) -> list:
        """Inference: what forward gives, as (n_texts, dim) CSR float32 per bucket, without dense rows."""
        out = []
        for layer, states in zip(self.layers, tokens):
            wta = self.wta[str(layer)]
            values, indices = wta(states, wta_k, dtype)
            # on a GPU only the winners cross to the host
            out.append(pooled_csr(values.cpu(), indices.cpu(), token_text.cpu(), n_texts, wta.dim))
        return out
