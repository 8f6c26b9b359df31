"""Why a document matched: the shared latent dimensions, their share of the score, and the tokens behind them.

A dimension is active in a text when some token made it one of its WTA winners (max-pool, Eq. 4); the token with
the largest activation is the one that set its value. Each dimension's contribution is measured by the index
itself (one single-dimension query per active query dimension, every other document masked out), so the
contributions add up to the score /search reports, for static and segmented indexes alike.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from uhdsearch.index.base import SearchableIndex
from uhdsearch.sparse import SparseEncoding

logger = logging.getLogger(__name__)


@dataclass
class TokenWinners:
    """One text's WTA winners in one bucket: token strings and (n_tokens, wta_k) values and dimensions."""

    tokens: list[str]
    token_ids: np.ndarray
    values: np.ndarray
    dims: np.ndarray

    def tokens_of(self, dim: int, limit: int = 5) -> list[tuple[str, float]]:
        """The tokens that made `dim` a positive winner, strongest first (the first one set the pooled value)."""
        rows, cols = np.nonzero((self.dims == dim) & (self.values > 0))
        values = self.values[rows, cols]
        best: dict[str, float] = {}
        for i in np.argsort(-values, kind="stable").tolist():
            best.setdefault(self.tokens[rows[i]], float(values[i]))
        return list(best.items())[:limit]


def query_winners(encoder, text: str) -> tuple[list[TokenWinners], SparseEncoding]:
    """One query's token winners per bucket and its raw encoding, pooled from them: what
    `encoder.encode([text], "query")` gives (no query_k), from the one backbone pass and head product."""
    pooled: list = []
    winners = token_winners(encoder, [text], "query", pooled)[0]
    return winners, SparseEncoding(pooled, np.zeros(1, dtype=bool))


def token_winners(encoder, texts: Sequence[str], kind: str, pooled: list | None = None) -> list[list[TokenWinners]]:
    """Per text, per bucket, the winners of every token, as the encoder computes them before pooling.

    pooled: a list to receive each bucket's pooled (len(texts), dim) CSR rows, as encoding gives them.
    """
    import torch

    from uhdsearch.encoder.modes import evaluating
    from uhdsearch.encoder.precision import product_dtype
    from uhdsearch.encoder.winners import pooled_csr

    config = encoder.config
    max_length = config.query_max_length if kind == "query" else config.document_max_length
    batch = encoder.backbone.tokenize(list(texts), max_length)
    dtype = product_dtype(config.wta_dtype)
    # Eval mode as encoding runs it: a model still in training mode would drop out states at random.
    with evaluating(encoder), torch.inference_mode():
        # The backbone as encoding runs it: ONNX Runtime when the encoder uses it (serve --onnx; ~2x faster on a
        # CPU, the same float32 graph), else PyTorch. A document's 256 tokens made /explain the costliest request.
        runner = encoder._backbone_runner() if hasattr(encoder, "_backbone_runner") else encoder.backbone
        states = runner(batch["input_ids"], batch["attention_mask"], encoder.layers)
        keep = batch["attention_mask"].bool()
        token_text = torch.nonzero(keep, as_tuple=True)[0].numpy()
        ids = batch["input_ids"][keep].numpy()
        per_bucket = []
        for layer, layer_states in zip(encoder.layers, states):
            tokens = layer_states[keep]
            if layer in encoder.state_transforms:
                tokens = encoder.state_transforms[layer](tokens)
            wta = encoder.buckets.wta[str(layer)]
            values, dims = wta(tokens, config.wta_k, dtype)
            if pooled is not None:
                pooled.append(pooled_csr(values, dims, torch.from_numpy(token_text), len(texts), wta.dim))
            per_bucket.append((values.float().numpy(), dims.numpy()))
    names = encoder.backbone.tokenizer.convert_ids_to_tokens(ids.tolist())
    out = []
    for t in range(len(texts)):
        rows = np.flatnonzero(token_text == t)
        text_names = [names[r] for r in rows]
        out.append([TokenWinners(text_names, ids[rows], values[rows], dims[rows]) for values, dims in per_bucket])
    return out


class WinnersCache:
    """The latest documents' token winners, bounded: /explain's costliest step is encoding the document's tokens
    (its backbone pass and the head's product over ~256 tokens), and the documents people ask about repeat (the
    top hits of common queries). Keyed by doc_id and checked against the text, so a replaced document is
    encoded again. `capacity` 0 turns it off; hits and misses are counted for /metrics.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity={capacity} must be >= 0")
        self.capacity = capacity
        self.hits = self.misses = 0
        self._entries: OrderedDict[str, tuple[str, list[TokenWinners]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, encoder, doc_id: str, text: str) -> list[TokenWinners]:
        """`text`'s winners per bucket (token_winners of the document), from the cache when it holds them."""
        with self._lock:
            entry = self._entries.get(doc_id)
            if entry is not None and entry[0] == text:
                self._entries.move_to_end(doc_id)
                self.hits += 1
                return entry[1]
            self.misses += 1
        winners = [_compact(w) for w in token_winners(encoder, [text], "document")[0]]
        if self.capacity:
            with self._lock:
                self._entries[doc_id] = (text, winners)
                self._entries.move_to_end(doc_id)
                while len(self._entries) > self.capacity:
                    self._entries.popitem(last=False)
        return winners

    def __len__(self) -> int:
        return len(self._entries)


def _compact(winners: TokenWinners) -> TokenWinners:
    """int32 dimensions (torch's top-k gives int64): half the memory a cached document holds."""
    return TokenWinners(winners.tokens, winners.token_ids, winners.values, winners.dims.astype(np.int32))


def dim_contributions(
    index: SearchableIndex, query: SparseEncoding, number: int, bucket_weights: Sequence[float], scoring: str,
    length_norm: float = 0.0,
) -> list[tuple[int, int, float, float]]:
    """(bucket, dim, query value, contribution) of every query dimension the document `number` shares.

    `query` is one encoded query row. Contributions are bucket-weighted (and length-normalized), as in the score.
    """
    if index.scores_own_contributions:  # impact planes quantize the query as a whole (index/impacts.py)
        return index.contributions(query, number, bucket_weights)
    rows = [(b, int(d), float(v)) for b, m in enumerate(query.buckets) for d, v in zip(m.indices, m.data)]
    if not rows:
        return []
    buckets = []
    for b in range(query.n_buckets):
        mine = [i for i, row in enumerate(rows) if row[0] == b]
        buckets.append(sp.csr_matrix(([rows[i][2] for i in mine], (mine, [rows[i][1] for i in mine])),
                                     shape=(len(rows), query.dim), dtype=np.float32))
    n_numbers = len(index.doc_ids)  # a segmented index numbers its deleted documents too
    outside = np.ones(n_numbers, dtype=bool)
    outside[number] = False
    # Each one-dim query reads only the 64 documents around `number` where the index can (a whole index of
    # 100k documents per dim made /explain cost 190 ms of a 360 ms request).
    word = number - number % 64
    span = {"documents": (word, min(n_numbers, word + 64))} if index.searches_document_ranges else {}
    numbers, scores = index.search_encoded(SparseEncoding(buckets), 1, bucket_weights, scoring, deleted=outside,
                                           length_norm=length_norm, **span)
    return [(b, d, v, float(scores[i, 0])) for i, (b, d, v) in enumerate(rows)
            if numbers[i, 0] == number and scores[i, 0] > 0]


class TypicalTokens:
    """Each dimension's most frequent activating tokens over a sample of the corpus, computed once in background.

    `get` answers None until the sample is done (or when there are no texts to sample).
    """

    def __init__(self, encoder, texts: Sequence[str], per_dim: int = 5, batch_size: int = 16) -> None:
        self._encoder = encoder
        self._texts = list(texts)
        self._per_dim = per_dim
        self._batch_size = batch_size
        self._table: list[dict[int, list[tuple[str, int]]]] | None = None
        self._thread: threading.Thread | None = None
        self.n_documents = len(self._texts)

    @property
    def ready(self) -> bool:
        return self._table is not None

    def start(self) -> None:
        if self._texts and self._thread is None:
            self._thread = threading.Thread(target=self._compute, name="typical-tokens", daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.ready

    def get(self, bucket: int, dim: int) -> list[tuple[str, int]] | None:
        return None if self._table is None else self._table[bucket].get(dim, [])

    def _compute(self) -> None:
        try:
            self._table = self._count()
            logger.info("typical tokens of %d dimensions from %d documents", sum(map(len, self._table)),
                        len(self._texts))
        except Exception:  # the service goes on without them; /explain says they are unavailable
            logger.exception("computing the typical tokens failed")

    def _count(self) -> list[dict[int, list[tuple[str, int]]]]:
        n_buckets = self._encoder.config.n_buckets
        keys: list[list[np.ndarray]] = [[] for _ in range(n_buckets)]
        names: dict[int, str] = {}
        for start in range(0, len(self._texts), self._batch_size):
            for text in token_winners(self._encoder, self._texts[start:start + self._batch_size], "document"):
                for b, winners in enumerate(text):
                    names.update(zip(winners.token_ids.tolist(), winners.tokens))
                    positive = winners.values > 0
                    ids = np.broadcast_to(winners.token_ids[:, None], winners.dims.shape)
                    keys[b].append(winners.dims[positive].astype(np.int64) << 32 | ids[positive].astype(np.int64))
        table = []
        for parts in keys:
            found, counts = np.unique(np.concatenate(parts) if parts else np.zeros(0, np.int64), return_counts=True)
            dims, ids = found >> 32, found & 0xFFFFFFFF
            order = np.lexsort((-counts, dims))  # by dim, then most frequent first
            bucket: dict[int, list[tuple[str, int]]] = {}
            for i in order.tolist():
                kept = bucket.setdefault(int(dims[i]), [])
                if len(kept) < self._per_dim:
                    kept.append((names[int(ids[i])], int(counts[i])))
            table.append(bucket)
        return table
