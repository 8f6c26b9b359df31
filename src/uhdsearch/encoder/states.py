"""Packed per-layer token states of many texts from a frozen backbone, computed once and reused.

With a frozen backbone the token states of a corpus never change, so training, indexing and the dense
baseline can share one backbone pass instead of three (the backbone is most of a CPU's encoding time).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from uhdsearch.encoder.backbone import tokenize_texts
from uhdsearch.encoder.modes import evaluating
from uhdsearch.errors import UsageError
from uhdsearch.types import Document


@dataclass
class TokenStates:
    """Non-padding token states of n texts, packed: text i owns rows offsets[i]:offsets[i+1].

    states[j]: (n_tokens, hidden) bfloat16 states of backbone layer layers[j];
    char_spans: (n_tokens, 2) int32 character span of each token in its text ((0, 0) for special tokens).
    """

    layers: list[int]
    states: list[torch.Tensor]
    offsets: np.ndarray
    char_spans: np.ndarray

    @property
    def n(self) -> int:
        """The number of texts."""
        return int(self.offsets.shape[0] - 1)

    def layer(self, layer: int) -> torch.Tensor:
        """(n_tokens, hidden) bfloat16 states of backbone layer `layer` (one of `layers`)."""
        return self.states[self.layers.index(layer)]

    def select(self, layers: Sequence[int]) -> TokenStates:
        """The same texts with only `layers` (tensors shared, not copied)."""
        missing = [layer for layer in layers if layer not in self.layers]
        if missing:
            raise UsageError(f"token states hold layers {self.layers}, not {missing}")
        return TokenStates(list(layers), [self.layer(layer) for layer in layers], self.offsets, self.char_spans)

    def truncated(self, max_tokens: int) -> TokenStates:
        """The same texts cut to their first `max_tokens` token states (copies).

        >>> s = TokenStates([6], [torch.arange(5.).reshape(5, 1)], np.array([0, 3, 5]), np.zeros((5, 2), np.int32))
        >>> t = s.truncated(2)
        >>> t.offsets.tolist(), t.layer(6).flatten().tolist()
        ([0, 2, 4], [0.0, 1.0, 3.0, 4.0])
        """
        if max_tokens < 1:
            raise UsageError(f"max_tokens={max_tokens} must be >= 1")
        lengths = np.minimum(np.diff(self.offsets), max_tokens)
        keep = np.concatenate([np.arange(lo, lo + n) for lo, n in zip(self.offsets[:-1], lengths)] or [[]])
        keep = keep.astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(self.offsets.dtype)
        index = torch.from_numpy(keep)
        return TokenStates(list(self.layers), [s.index_select(0, index) for s in self.states], offsets,
                           self.char_spans[keep])

    def gather(self, rows: Sequence[int], layers: Sequence[int], drop: np.ndarray | None = None):
        """Token states of `rows` as packed float32 tensors plus each token's position in `rows`.

        Args:
            drop: optional (n_tokens,) bool over this object's tokens; True tokens are left out
                (the Inverse Cloze Task removes the query sentence from its passage this way).
        Returns:
            per layer (n_selected, hidden) float32, and token_text (n_selected,) int64.
        """
        pieces, owners = [], []
        for position, row in enumerate(rows):
            lo, hi = int(self.offsets[row]), int(self.offsets[row + 1])
            idx = np.arange(lo, hi)
            if drop is not None:
                idx = idx[~drop[lo:hi]]
            pieces.append(idx)
            owners.append(np.full(idx.shape[0], position))
        index = torch.from_numpy(np.concatenate(pieces)) if pieces else torch.zeros(0, dtype=torch.long)
        token_text = torch.from_numpy(np.concatenate(owners)).long() if owners else torch.zeros(0, dtype=torch.long)
        return [self.layer(layer).index_select(0, index).float() for layer in layers], token_text


def compute_token_states(
    backbone, texts: Sequence[str], layers: Sequence[int], max_length: int, batch_size: int = 32,
    show_progress: bool = True, desc: str = "backbone",
) -> TokenStates:
    """Run the backbone once over `texts` (length-sorted batches) and keep the requested layers' states.

    Args:
        backbone: a Backbone (its tokenizer truncates; its forward returns the asked layers' hidden states).
        texts: the texts, in the order the result's rows follow.
        layers: absolute backbone layers to keep (0 = the embeddings, `backbone.n_layers` = the last).
        max_length: token limit per text, special tokens included.
        batch_size: texts per forward pass.
        show_progress: a tqdm bar on stderr.
        desc: the bar's label.

    Returns:
        TokenStates of `texts`: per layer (n_tokens, hidden) bfloat16, packed without padding.
    """
    texts = list(texts)
    tokenizer = backbone.tokenizer
    enc = tokenize_texts(tokenizer, texts, truncation=True, max_length=max_length, return_offsets_mapping=True)
    ids, spans = enc["input_ids"], enc["offset_mapping"]
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    hidden = backbone.hidden_size
    out = [torch.empty(int(offsets[-1]), hidden, dtype=torch.bfloat16) for _ in layers]
    order = np.argsort(-lengths, kind="stable")
    with evaluating(backbone), torch.inference_mode(), tqdm(total=len(texts), desc=desc, unit="text",
                                                            disable=not show_progress, leave=False) as bar:
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            batch = tokenizer.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="pt")
            layer_states = backbone(batch["input_ids"], batch["attention_mask"], list(layers))
            for j, states in enumerate(layer_states):
                for position, row in enumerate(rows):
                    n = lengths[row]
                    out[j][offsets[row] : offsets[row] + n] = states[position, :n].to(torch.bfloat16)
            bar.update(len(rows))
    char_spans = np.array([s for text_spans in spans for s in text_spans], dtype=np.int32).reshape(-1, 2)
    return TokenStates(list(layers), out, offsets, char_spans)


def corpus_states(
    backbone, corpus: Mapping[str, Document] | Sequence[Document], states: TokenStates | None = None,
    max_length: int = 256, show_progress: bool = True,
) -> tuple[list[Document], TokenStates]:
    """A corpus as a list of Documents, with token states of them that hold the backbone's last layer.

    The dense, DE-k, ME-m and sum-of-max systems all index from the last layer. States computed once for the
    corpus (`compute_token_states`, shared by every system of a comparison) are reused when they hold that
    layer; otherwise the backbone runs over the documents' full texts here.

    Args:
        backbone: the Backbone the states come from; its last layer is `backbone.n_layers`.
        corpus: {doc_id: Document} or a sequence of Documents; this order is the states' row order.
        states: token states of exactly these documents (any layers), or None to compute them.
        max_length: document token limit of a new backbone pass.
        show_progress: a tqdm bar on stderr during a new backbone pass.

    Returns:
        (documents, states): the Documents in corpus order, and token states with one row per document that
        include layer `backbone.n_layers` (bfloat16, as compute_token_states keeps them).

    Raises:
        UsageError: the corpus is empty, or `states` covers another number of texts than the corpus has.

    Examples:
        >>> corpus_states(None, [])
        Traceback (most recent call last):
        ...
        uhdsearch.errors.UsageError: the corpus is empty: nothing to index
    """
    documents = list(corpus.values()) if isinstance(corpus, Mapping) else list(corpus)
    if not documents:
        raise UsageError("the corpus is empty: nothing to index")
    last = backbone.n_layers
    if states is None or last not in states.layers:
        states = compute_token_states(backbone, [d.full_text for d in documents], [last], max_length,
                                      show_progress=show_progress, desc="backbone documents")
    if states.n != len(documents):
        raise UsageError(f"states cover {states.n} texts but the corpus has {len(documents)} documents")
    return documents, states
