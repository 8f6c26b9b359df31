"""DE-k (Luan et al. §6.1): backbone + learned down-projection to k dims + LayerNorm, exact inner-product search.

Trained with softmax cross-entropy over in-batch plus sampled negatives (Luan §6.2); with cosine similarity and
scale 20 this is the InfoNCE / MultipleNegativesRankingLoss of Reimers & Gurevych. By default the backbone is
frozen and only the head trains on token states computed once (a CPU budget; Luan fine-tune all of BERT).
The same retriever class serves ME-m (multivector.py): a document may own several index entries.
"""
from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.states import TokenStates, compute_token_states, corpus_states
from uhdsearch.errors import UsageError
from uhdsearch.topk import top_k
from uhdsearch.training.data import TrainingPair, remove_span, unique_document_batches
from uhdsearch.types import Document, Query, Run, ScoredDoc, start_run

logger = logging.getLogger(__name__)

Pooling = Literal["cls", "mean"]
Similarity = Literal["cosine", "dot"]
# embed(tokens (n_tokens, hidden) float32, token_text (n_tokens,) int64, n_texts) -> (n_texts, dim) float32
Embed = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


def mean_tokens(tokens: torch.Tensor, token_text: torch.Tensor, n_texts: int) -> torch.Tensor:
    """(n_texts, hidden): the mean of each text's token states (not normalized)."""
    sums = torch.zeros(n_texts, tokens.shape[1], dtype=tokens.dtype).index_add_(0, token_text, tokens)
    counts = torch.bincount(token_text, minlength=n_texts).clamp_min(1).unsqueeze(1).to(tokens.dtype)
    return sums / counts


def first_tokens(tokens: torch.Tensor, token_text: torch.Tensor, n_texts: int, m: int = 1):
    """The first `m` token states of each text (the first is [CLS]).

    Returns:
        (n_selected, hidden) states and (n_selected,) int64 owner text; a text shorter than m gives fewer.
    """
    starts = torch.searchsorted(token_text, torch.arange(n_texts))
    position = torch.arange(token_text.shape[0]) - starts[token_text]
    keep = position < m
    return tokens[keep], token_text[keep]


class DualEncoderHead(nn.Module):
    """Pooling, then Linear(hidden -> dim) and LayerNorm (Luan §6.1); dim=None keeps the backbone's width.

    With similarity="cosine" the output is L2-normalized (scores are cosines); "dot" keeps raw inner products.
    """

    def __init__(self, hidden: int, dim: int | None = None, pooling: Pooling = "cls",
                 similarity: Similarity = "cosine", seed: int = 0) -> None:
        super().__init__()
        if dim is not None and dim <= 0:
            raise UsageError(f"dim={dim} must be positive (or None for the backbone's width {hidden})")
        if pooling not in ("cls", "mean"):
            raise UsageError(f"pooling={pooling!r}: use 'cls' or 'mean'")
        if similarity not in ("cosine", "dot"):
            raise UsageError(f"similarity={similarity!r}: use 'cosine' or 'dot'")
        torch.manual_seed(seed)
        self.hidden, self.pooling, self.similarity = hidden, pooling, similarity
        self.projection = nn.Linear(hidden, dim) if dim is not None else None
        self.norm = nn.LayerNorm(dim or hidden)

    @property
    def dim(self) -> int:
        return self.norm.normalized_shape[0]

    def project(self, vectors: torch.Tensor) -> torch.Tensor:
        """(n, hidden) -> (n, dim): projection, LayerNorm, and unit length for cosine."""
        x = self.projection(vectors) if self.projection is not None else vectors
        x = self.norm(x)
        return nn.functional.normalize(x, dim=1) if self.similarity == "cosine" else x

    def forward(self, tokens: torch.Tensor, token_text: torch.Tensor, n_texts: int) -> torch.Tensor:
        """(n_texts, dim) text vectors from packed token states."""
        if self.pooling == "mean":
            pooled = mean_tokens(tokens, token_text, n_texts)
        else:
            pooled, _ = first_tokens(tokens, token_text, n_texts, 1)
        return self.project(pooled)

    def entries(self, tokens: torch.Tensor, token_text: torch.Tensor, n_texts: int, m: int):
        """ME-m document entries (Luan Eq. 12): the first m token states, each projected.

        Returns:
            (n_entries, dim) vectors and (n_entries,) int64 owner text, owners ascending.
        """
        selected, owner = first_tokens(tokens, token_text, n_texts, m)
        return self.project(selected), owner


@dataclass(frozen=True)
class DualEncoderArgs:
    """Training settings; the defaults are a CPU recipe for a frozen backbone (head-only training)."""

    epochs: float = 3.0
    batch_size: int = 32
    learning_rate: float = 1e-3  # a freshly initialised head; Luan fine-tune all of BERT with far smaller rates
    weight_decay: float = 0.01
    scale: float = 20.0  # logits = scale * cosine (Reimers & Gurevych); ignored for similarity="dot"
    n_sampled_negatives: int = 7  # Luan §6.2: 7 sampled negatives (here random documents, shared in a batch)
    n_vectors: int = 1  # > 1 trains ME-m: a document scores by its best of m entries (Eq. 12)
    train_backbone_layers: int = 0  # 0 frozen (cached states), N top layers, -1 all
    max_steps: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 2:
            raise UsageError(f"batch_size={self.batch_size} must be at least 2 (in-batch negatives)")
        if self.epochs <= 0 or self.learning_rate <= 0:
            raise UsageError(f"epochs={self.epochs} and learning_rate={self.learning_rate} must be positive")
        if self.n_sampled_negatives < 0 or self.n_vectors < 1:
            raise UsageError(f"n_sampled_negatives={self.n_sampled_negatives} must be >= 0 and "
                             f"n_vectors={self.n_vectors} >= 1")


@dataclass
class DualEncoderTraining:
    """What training did: optimizer steps, loss per step, seconds."""

    steps: int = 0
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


def train_dual_encoder(
    head: DualEncoderHead, backbone: Backbone, documents: Sequence[Document], pairs: Sequence[TrainingPair],
    args: DualEncoderArgs = DualEncoderArgs(), document_states: TokenStates | None = None,
    max_length: int = 256, show_progress: bool = True,
) -> DualEncoderTraining:
    """Train `head` (and the top backbone layers if asked) in place on (query, positive) pairs.

    Loss: cross-entropy of each query's positive among the batch's documents plus `n_sampled_negatives`
    random documents; other positives of the same query are masked out. With args.n_vectors = m > 1 a
    document's score is the max over its first m entries (ME-m training, Luan §5).

    Args:
        document_states: backbone states of `documents` including the last layer (frozen backbone only).
    Returns:
        DualEncoderTraining with one loss per step.
    Raises:
        ValueError: no pairs, or states that do not cover the documents.
    """
    if not pairs:
        raise UsageError("no training pairs: check the qrels split or the corpus for ICT")
    last = backbone.n_layers
    frozen = args.train_backbone_layers == 0
    backbone.set_trainable_layers(args.train_backbone_layers)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    positives: dict[str, set[int]] = {}
    for p in pairs:
        positives.setdefault(p.query, set()).add(p.doc_row)
    if frozen:
        if document_states is None or last not in document_states.layers:
            document_states = compute_token_states(backbone, [d.full_text for d in documents], [last], max_length,
                                                   show_progress=show_progress, desc="backbone documents")
        if document_states.n != len(documents):
            raise UsageError(f"states cover {document_states.n} texts but there are {len(documents)} documents")
        query_texts = sorted(positives)
        query_states = _cached_query_states(backbone, query_texts, max_length)
        query_row = {q: i for i, q in enumerate(query_texts)}

    per_epoch = len(unique_document_batches(pairs, args.batch_size, args.seed))
    total = max(1, int(per_epoch * args.epochs))
    if args.max_steps:
        total = min(total, args.max_steps)
    params = [p for p in head.parameters()] + [p for p in backbone.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=args.weight_decay)
    warmup = max(1, total // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / max(1, total - warmup)))
    result = DualEncoderTraining()
    start = time.perf_counter()
    head.train()
    backbone.train(not frozen)
    bar = tqdm(total=total, desc="train dual encoder", unit="step", disable=not show_progress, leave=False)
    for epoch in range(math.ceil(args.epochs)):
        for batch in unique_document_batches(pairs, args.batch_size, args.seed + epoch):
            rows = [p.doc_row for p in batch]
            taken = set(rows)
            sampled = [r for r in rng.sample(range(len(documents)), min(len(documents), args.n_sampled_negatives
                                                                          + len(rows))) if r not in taken]
            columns = rows + sampled[: args.n_sampled_negatives]
            if frozen:
                q_tokens, q_owner = query_states.gather([query_row[p.query] for p in batch], [last])
                d_tokens, d_owner = document_states.gather(columns, [last], _ict_drop(document_states, batch))
                q_tokens, d_tokens = q_tokens[0], d_tokens[0]
            else:
                q_tokens, q_owner = _live_tokens(backbone, [p.query for p in batch], max_length)
                texts = [remove_span(documents[p.doc_row].full_text, p.drop) for p in batch]
                d_tokens, d_owner = _live_tokens(backbone, texts + [documents[r].full_text for r in columns[len(rows):]],
                                                 max_length)
            q = head(q_tokens, q_owner, len(batch))
            scores = _document_scores(head, q, d_tokens, d_owner, len(columns), args.n_vectors)
            if head.similarity == "cosine":
                scores = scores * args.scale
            mask = torch.tensor([[j != i and columns[j] in positives[p.query] for j in range(len(columns))]
                                 for i, p in enumerate(batch)])
            loss = nn.functional.cross_entropy(scores.masked_fill(mask, float("-inf")), torch.arange(len(batch)))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            result.steps += 1
            result.losses.append(float(loss.detach()))
            bar.update(1)
            if result.steps >= total:
                break
        if result.steps >= total:
            break
    bar.close()
    head.eval()
    backbone.eval()
    result.seconds = time.perf_counter() - start
    return result


_QUERY_STATES: dict[tuple, TokenStates] = {}


def _cached_query_states(backbone: Backbone, texts: list[str], max_length: int) -> TokenStates:
    """States of the training queries; the last set is kept, so DE-k and ME-m runs on one backbone share them."""
    key = (id(backbone), backbone.n_layers, max_length, hash(tuple(texts)))
    if key not in _QUERY_STATES:
        _QUERY_STATES.clear()
        _QUERY_STATES[key] = compute_token_states(backbone, texts, [backbone.n_layers], max_length,
                                                  show_progress=False)
    return _QUERY_STATES[key]


def _document_scores(head, q, d_tokens, d_owner, n_docs: int, m: int) -> torch.Tensor:
    """(n_queries, n_docs): query vectors against pooled documents (m=1) or the best of m entries."""
    if m == 1:
        return q @ head(d_tokens, d_owner, n_docs).t()
    entries, owner = head.entries(d_tokens, d_owner, n_docs, m)
    per_entry = q @ entries.t()
    best = torch.full((q.shape[0], n_docs), float("-inf"))
    return best.scatter_reduce(1, owner.expand(q.shape[0], -1), per_entry, reduce="amax", include_self=True)


def _live_tokens(backbone: Backbone, texts: list[str], max_length: int):
    batch = backbone.tokenize(texts, max_length)
    states = backbone(batch["input_ids"], batch["attention_mask"], [backbone.n_layers])[0]
    keep = batch["attention_mask"].bool()
    return states[keep], torch.nonzero(keep, as_tuple=True)[0]


def _ict_drop(states: TokenStates, batch: Sequence[TrainingPair]) -> np.ndarray | None:
    """Tokens of each ICT pair's query sentence, left out of its positive passage (Luan §7)."""
    if all(p.drop is None for p in batch):
        return None
    drop = np.zeros(states.char_spans.shape[0], dtype=bool)
    for p in batch:
        if p.drop is not None:
            lo, hi = int(states.offsets[p.doc_row]), int(states.offsets[p.doc_row + 1])
            spans = states.char_spans[lo:hi]
            drop[lo:hi] = (spans[:, 1] > p.drop[0]) & (spans[:, 0] < p.drop[1]) & (spans[:, 1] > spans[:, 0])
    return drop


class DualEncoder:
    """Exact inner-product search over document entries (a `Retriever`); a document scores by its best entry.

    One entry per document is a dual encoder (DE-k, dense + whitening or flows); m entries is ME-m.
    Queries go through the backbone's last layer and `embed_query`.

    Examples:
        >>> from uhdsearch.types import Document
        >>> docs = [Document("d1", "Vitamin D supplements and bone mineral density"),
        ...         Document("d2", "Sequencing the mouse genome"), Document("d3", "Heart failure after cardiac surgery")]
        >>> backbone = Backbone.from_pretrained()
        >>> head = DualEncoderHead(backbone.hidden_size, dim=None, pooling="mean")  # untrained: LayerNorm only
        >>> de = build_dual_encoder(docs, backbone, head, show_progress=False)
        >>> de.search({"q1": "does vitamin d strengthen bones"}, k=2).doc_ids("q1")[0]
        'd1'
    """

    def __init__(self, backbone: Backbone, embed_query: Embed, doc_ids: Sequence[str], entries: np.ndarray,
                 owners: np.ndarray | None = None, query_max_length: int = 256, name: str = "dual-encoder") -> None:
        entries = np.ascontiguousarray(entries, dtype=np.float32)
        owners = np.arange(len(doc_ids)) if owners is None else np.asarray(owners, dtype=np.int64)
        if entries.shape[0] != owners.shape[0]:
            raise UsageError(f"{entries.shape[0]} entries but {owners.shape[0]} owners")
        if owners.size and np.any(np.diff(owners) < 0):
            raise UsageError("entry owners must be ascending (entries grouped by document)")
        self.backbone = backbone
        self.embed_query = embed_query
        self.doc_ids = list(doc_ids)
        self.entries = entries
        self.owners = owners
        self.query_max_length = query_max_length
        self.name = name
        # reduceat needs the first entry of every document; a document without entries never scores.
        self._starts = np.searchsorted(owners, np.arange(len(self.doc_ids)))
        self._has_entries = np.bincount(owners, minlength=len(self.doc_ids)) > 0

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32 query vectors."""
        last = self.backbone.n_layers
        states = compute_token_states(self.backbone, texts, [last], self.query_max_length, show_progress=False)
        tokens, owner = states.gather(range(states.n), [last])
        with torch.no_grad():
            return self.embed_query(tokens[0], owner, states.n).numpy().astype(np.float32)

    def document_scores(self, query_vectors: np.ndarray) -> np.ndarray:
        """(n_queries, n_docs) float32: each document's best entry score (-inf without entries)."""
        per_entry = query_vectors @ self.entries.T
        scores = np.maximum.reduceat(per_entry, np.minimum(self._starts, per_entry.shape[1] - 1), axis=1)
        scores[:, ~self._has_entries] = -np.inf
        return scores

    def search(self, queries: Mapping[str, str] | Sequence[Query], k: int = 1000) -> Run:
        """Exact top-k per query; ties broken by doc number (corpus order)."""
        run, live = start_run(queries, k, self.name)
        if not live:
            return run
        scores = self.document_scores(self.encode_queries([q.text for q in live]))
        for q, row in zip(live, scores):
            row = np.where(np.isfinite(row), row, np.nan)
            valid = np.flatnonzero(~np.isnan(row))
            if not valid.size:
                continue
            numbers, values = top_k(row[valid], min(k, valid.size), positive_only=False)
            run.results[q.query_id] = [ScoredDoc(self.doc_ids[valid[n]], float(v)) for n, v in zip(numbers, values)]
        return run


def embed_states(embed: Embed, states: TokenStates, layer: int, batch_size: int = 256) -> np.ndarray:
    """(states.n, dim) float32: `embed` applied to cached texts in batches."""
    out = []
    with torch.no_grad():
        for start in range(0, states.n, batch_size):
            rows = range(start, min(states.n, start + batch_size))
            tokens, owner = states.gather(rows, [layer])
            out.append(embed(tokens[0], owner, len(rows)).numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, 0), np.float32)


def build_dual_encoder(
    corpus: Mapping[str, Document] | Sequence[Document], backbone: Backbone, head: DualEncoderHead,
    states: TokenStates | None = None, max_length: int = 256, name: str = "de", show_progress: bool = True,
) -> DualEncoder:
    """Index `corpus` with a (trained) head: one vector per document.

    Args:
        states: backbone states of the corpus documents including the last layer; computed if None.
    Raises:
        ValueError: empty corpus, or states that do not cover it.
    """
    documents, states = corpus_states(backbone, corpus, states, max_length, show_progress)
    head.eval()
    vectors = embed_states(head, states, backbone.n_layers)
    return DualEncoder(backbone, head, [d.doc_id for d in documents], vectors, None, max_length, name)
