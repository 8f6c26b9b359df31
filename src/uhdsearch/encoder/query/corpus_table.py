"""Inference-free query tables learned from a corpus: each vocabulary token's row summarises what the full encoder
gave that token *in context*, over its occurrences in the documents (computed at index time, no training).

Two summaries (`CorpusTable.tables`):
- "winners": the mean over a token's occurrences of its sparse WTA output (a winner's value, 0 where the dim did
  not win), keeping the `keep` largest dims; the dims the token most often wins with in context.
- "mean-state": the `keep` WTA winners of the token's mean contextual state.
[CLS] and [SEP] get rows too (every query has them in the full encoder). Tokens never seen in the corpus keep
the context-free row of `table.build_table` where one is given, else stay empty.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch

from uhdsearch.encoder.backbone import tokenize_texts
from uhdsearch.encoder.query.neighbours import NeighbourTable, keep_largest
from uhdsearch.encoder.pooling import l2_normalize
from uhdsearch.encoder.precision import product_dtype
from uhdsearch.errors import UsageError

SUMMARIES = ("winners", "mean-state")
MIN_SENTENCE_WORDS = 4  # shorter pieces ("Too short.", "et al.") carry little query-like context


def split_sentences(texts: Sequence[str]) -> list[str]:
    """The sentences of `texts` (split after . ! or ? and white space) of at least MIN_SENTENCE_WORDS words."""
    return [s for t in texts for s in re.split(r"(?<=[.!?])\s+", t.strip()) if len(s.split()) >= MIN_SENTENCE_WORDS]


class CorpusTable:
    """Accumulates, per bucket, the winners and states of a corpus's tokens; `tables` summarises them.

    Examples:
        >>> from uhdsearch.encoder.config import EncoderConfig
        >>> from uhdsearch.encoder.model import UHDEncoder
        >>> model = UHDEncoder.new(config=EncoderConfig(dim=1024, wta_k=8, query_k=None))
        >>> texts = ["bone density in older women", "density of bone tissue"]
        >>> states = model.token_states(texts, show_progress=False)
        >>> ids = model.backbone.tokenizer(texts, truncation=True, max_length=180)["input_ids"]
        >>> table = CorpusTable.from_states(model, states, np.concatenate(ids))
        >>> bone = model.backbone.tokenizer.convert_tokens_to_ids("bone")
        >>> int(table.occurrences[bone]), table.tables("winners", keep=8)[0][bone].nnz
        (2, 8)
    """

    def __init__(self, model) -> None:
        self.model = model
        self.vocab = len(model.backbone.tokenizer)
        self.occurrences = np.zeros(self.vocab, np.int64)
        self._sums: list[sp.csr_matrix] = [sp.csr_matrix((self.vocab, model.config.dim), dtype=np.float64)
                                           for _ in model.layers]
        self._states = [torch.zeros(self.vocab, model.backbone.hidden_size, dtype=torch.float64) for _ in model.layers]
        self._pending: list[list[sp.coo_matrix]] = [[] for _ in model.layers]
        self.neighbours: NeighbourTable | None = None  # pair rows, when learned (neighbours.py)

    def add(self, token_ids: np.ndarray, states: Sequence[torch.Tensor], winners: Sequence[tuple]) -> None:
        """One batch of tokens: their vocabulary ids, per bucket their states and (values, dims) winners."""
        token_ids = np.asarray(token_ids, np.int64)
        np.add.at(self.occurrences, token_ids, 1)
        ids = torch.from_numpy(token_ids)
        for b, (tokens, (values, dims)) in enumerate(zip(states, winners)):
            self._states[b].index_add_(0, ids, tokens.double())
            k = dims.shape[1]
            data = values.clamp_min(0).reshape(-1).numpy().astype(np.float64)
            self._pending[b].append(sp.coo_matrix((data, (np.repeat(token_ids, k), dims.reshape(-1).numpy())),
                                                  shape=self._sums[b].shape))
            if len(self._pending[b]) >= 16:  # summing in groups bounds memory: duplicates add up on conversion
                self._flush(b)

    def _flush(self, b: int) -> None:
        if self._pending[b]:
            self._sums[b] = self._sums[b] + sum(p.tocsr() for p in self._pending[b])
            self._pending[b] = []

    @classmethod
    def from_states(cls, model, states, token_ids: np.ndarray, rows: Sequence[int] | None = None,
                    batch_size: int = 64, neighbours: bool = False) -> CorpusTable:
        """Run the WTA heads over cached token states (encoder/states.py) of `rows` (None: all texts).

        token_ids: (n_tokens,) the vocabulary id of every token of `states`, in its packing order.
        neighbours: also learn the rows of (token, left / right neighbour) pairs (`.neighbours`).
        """
        table = cls(model)
        if neighbours:
            table.neighbours = NeighbourTable(table.vocab, model.config.dim, len(model.layers))
        rows = list(range(states.n)) if rows is None else list(rows)
        dtype = product_dtype(model.config.wta_dtype)
        with torch.inference_mode():
            for start in range(0, len(rows), batch_size):
                batch = rows[start:start + batch_size]
                tokens, _ = states.gather(batch, model.layers)
                ids = np.concatenate([token_ids[states.offsets[r]:states.offsets[r + 1]] for r in batch])
                winners = [model.buckets.wta[str(layer)](t, model.config.wta_k, dtype)
                           for layer, t in zip(model.layers, tokens)]
                table.add(ids, tokens, winners)
                if table.neighbours is not None:  # a text's first token has no left neighbour, its last no right
                    texts = [token_ids[states.offsets[r]:states.offsets[r + 1]] for r in batch]
                    left = np.concatenate([np.r_[-1, t[:-1]] for t in texts])
                    right = np.concatenate([np.r_[t[1:], -1] for t in texts])
                    table.neighbours.add(ids, left, right, winners)
        return table

    @classmethod
    def from_texts(cls, model, texts: Sequence[str], show_progress: bool = True) -> CorpusTable:
        """Encode `texts` as documents through the backbone once and learn the table from their tokens."""
        states = model.token_states(list(texts), "document", show_progress=show_progress)
        return cls.from_states(model, states, _token_ids(model, texts, model.config.document_max_length, states))

    @classmethod
    def from_sentences(cls, model, texts: Sequence[str], show_progress: bool = True,
                       neighbours: bool = False) -> CorpusTable:
        """Split `texts` into sentences (of at least MIN_SENTENCE_WORDS words), encode each *as a query* and learn
        the table from their tokens: query-like contexts, which on SciFact train beat whole documents' (0.7100
        against 0.6869 binary nDCG@10, benchmarks/experiments/lookup_queries.py --sentence-tables).

        Examples:
            >>> split_sentences(["Bone loss rises with age. It is slow! Too short. Density falls in older women?"])
            ['Bone loss rises with age.', 'Density falls in older women?']
        """
        sentences = split_sentences(texts)
        if not sentences:
            raise UsageError(f"no sentence of at least {MIN_SENTENCE_WORDS} words in the {len(texts)} texts")
        states = model.token_states(sentences, "query", show_progress=show_progress)
        return cls.from_states(model, states, _token_ids(model, sentences, model.config.query_max_length, states),
                               neighbours=neighbours)

    def tables(self, summary: str = "winners", keep: int | None = None,
               fallback: Sequence[sp.csr_matrix] | None = None) -> list[sp.csr_matrix]:
        """(vocab, dim) CSR float32 per bucket, rows L2-normalized; `keep` dims per row (None: wta_k)."""
        if summary not in SUMMARIES:
            raise UsageError(f"summary={summary!r}; choose one of {', '.join(SUMMARIES)}")
        keep = keep or self.model.config.wta_k
        seen = self.occurrences > 0
        out = []
        for b, layer in enumerate(self.model.layers):
            if summary == "winners":
                self._flush(b)
                table = keep_largest(self._sums[b], keep)
            else:
                table = self._mean_state_rows(b, layer, seen, keep)
            if fallback is not None:
                unseen = sp.diags((~seen).astype(np.float32))
                table = table + unseen @ fallback[b]
            out.append(table.astype(np.float32).tocsr())
        return out

    def _mean_state_rows(self, b: int, layer: int, seen: np.ndarray, keep: int) -> sp.csr_matrix:
        ids = np.flatnonzero(seen)
        mean = (self._states[b][ids] / torch.from_numpy(self.occurrences[ids]).unsqueeze(1)).float()
        dtype = product_dtype(self.model.config.wta_dtype)
        with torch.inference_mode():
            values, dims = self.model.buckets.wta[str(layer)](mean, keep, dtype)
        values = values.clamp_min(0)  # as in the max-pool, a non-positive winner is no active dim
        values = l2_normalize(values)
        k = dims.shape[1]
        return sp.csr_matrix((values.reshape(-1).numpy(), (np.repeat(ids, k), dims.reshape(-1).numpy())),
                             shape=(self.vocab, self.model.config.dim))


def _token_ids(model, texts: Sequence[str], max_length: int, states) -> np.ndarray:
    """(n_tokens,) the vocabulary ids of `texts` as the backbone packed `states` (the tokenizer's order)."""
    tokenized = tokenize_texts(model.backbone.tokenizer, list(texts), truncation=True,
                               max_length=max_length)["input_ids"]
    token_ids = np.concatenate([np.asarray(x, np.int64) for x in tokenized]) if tokenized else np.zeros(0, np.int64)
    if token_ids.shape[0] != int(states.offsets[-1]):
        raise UsageError(f"the tokenizer gave {token_ids.shape[0]} tokens, the backbone states "
                         f"{int(states.offsets[-1])}")
    return token_ids
