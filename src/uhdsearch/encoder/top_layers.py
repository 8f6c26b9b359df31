"""The top N backbone layers run on cached lower-layer states, so training them does not run the frozen ones.

With the layers below the cut frozen, their output (the top layers' input) never changes: it is computed once
(TokenStates at the cut layer, bfloat16) and each training step, dev evaluation or re-encoding runs only the top
layers, from the packed states re-padded with their attention mask. A top-layer step on all-MiniLM-L6-v2 costs a
fraction of a full backbone pass (README "Ablations").
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from uhdsearch.encoder.states import TokenStates
from uhdsearch.errors import UsageError


def cut_layer(backbone, n_top: int) -> int:
    """The layer whose states feed the top `n_top` transformer layers (0 = the embeddings)."""
    if not 0 < n_top < backbone.n_layers:
        raise UsageError(f"train_backbone_layers={n_top}: cached lower layers need 0 < N < {backbone.n_layers} "
                         "(the backbone's number of layers); use -1 to train all of it")
    return backbone.n_layers - n_top


def input_layers(bucket_layers: Sequence[int], cut: int) -> list[int]:
    """Layers to cache: the cut (the top layers' input) and any bucket layer at or below it."""
    return sorted({cut} | {layer for layer in bucket_layers if layer < cut})


def bucket_token_states(backbone, states: TokenStates, rows: Sequence[int], layers: Sequence[int],
                        drop: np.ndarray | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Packed token states of `layers` for `rows`: read from `states` where it holds them, the rest computed by
    running the backbone's layers above the highest cached one (differentiable where grad is enabled).

    Tokens `drop`ped (TokenStates.gather) are also left out of the top layers' attention.
    """
    missing = [layer for layer in layers if layer not in states.layers]
    if not missing:
        return states.gather(rows, layers, drop)
    cut = max(states.layers)
    if min(missing) <= cut:
        raise UsageError(f"token states of layers {states.layers} cannot give layer {min(missing)}: only layers "
                         f"above the highest cached one ({cut}) are computed")
    cached = [layer for layer in layers if layer in states.layers]
    tokens, token_text = states.gather(rows, [cut] + cached, drop)
    top = run_top_layers(backbone, tokens[0], token_text, len(rows), cut, missing)
    found = {**dict(zip(cached, tokens[1:])), **dict(zip(missing, top))}
    return [found[layer] for layer in layers], token_text


def run_top_layers(backbone, tokens: torch.Tensor, token_text: torch.Tensor, n_texts: int, cut: int,
                   wanted: Sequence[int]) -> list[torch.Tensor]:
    """Run layers cut+1..max(wanted) on packed (n_tokens, hidden) states of `n_texts` texts (rows grouped by text,
    in order); returns the packed states of each `wanted` layer."""
    from transformers.masking_utils import create_bidirectional_mask

    lengths = torch.bincount(token_text, minlength=n_texts)
    starts = torch.cumsum(lengths, 0) - lengths
    position = torch.arange(token_text.shape[0]) - starts[token_text]
    hidden = tokens.new_zeros(n_texts, int(lengths.max()) if n_texts else 0, tokens.shape[1])
    hidden = hidden.index_put((token_text, position), tokens)
    mask = torch.zeros(hidden.shape[:2], dtype=torch.long)
    mask[token_text, position] = 1
    config = backbone.model.config
    attention = create_bidirectional_mask(config=config, inputs_embeds=hidden, attention_mask=mask)
    modules = backbone._layer_modules()
    out = {}
    for layer in range(cut + 1, max(wanted) + 1):
        hidden = modules[layer - 1](hidden, attention)
        if isinstance(hidden, tuple):  # some 5.x releases still return (states, ...)
            hidden = hidden[0]
        if layer in wanted:
            out[layer] = hidden[token_text, position]
    return [out[layer] for layer in wanted]
