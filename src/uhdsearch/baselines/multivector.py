"""Multi-vector retrieval: ME-m (Luan et al. §5, Eq. 12) and sum-of-max late interaction (Luan §6.1, ColBERT-style).

ME-m indexes each document's first m contextual vectors and scores the maximum inner product with the query's
single vector (exact search over m entries per document). Sum-of-max sums, over query tokens, the best match
among a document's tokens; it is too costly for a full collection, so it re-ranks a first stage's list.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from uhdsearch.errors import UsageError
from uhdsearch.baselines.dual_encoder import DualEncoder, DualEncoderHead
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.states import TokenStates, compute_token_states, corpus_states
from uhdsearch.topk import top_k
from uhdsearch.types import Document, Query, Retriever, Run, ScoredDoc, as_queries, check_k, start_run

logger = logging.getLogger(__name__)

TokenTransform = Callable[[torch.Tensor], torch.Tensor]  # (n_tokens, hidden) -> (n_tokens, dim), float32


def build_multivector(
    corpus: Mapping[str, Document] | Sequence[Document], backbone: Backbone, head: DualEncoderHead, m: int,
    states: TokenStates | None = None, max_length: int = 256, name: str | None = None, show_progress: bool = True,
) -> DualEncoder:
    """ME-m: each document's first m token states through `head`'s projection, m index entries per document.

    The query is one vector, `head` applied to the query (Luan use [CLS]: pooling="cls"). With m=1 and a
    [CLS] head this is exactly the DE of the same head.

    Raises:
        ValueError: m < 1, empty corpus, or states that do not cover it.
    """
    if not isinstance(m, int) or m < 1:
        raise UsageError(f"m={m!r} must be a positive integer (vectors per document)")
    documents, states = corpus_states(backbone, corpus, states, max_length, show_progress)
    last = backbone.n_layers
    head.eval()
    entries, owners = [], []
    with torch.no_grad():
        for start in range(0, states.n, 256):
            rows = range(start, min(states.n, start + 256))
            tokens, owner = states.gather(rows, [last])
            vectors, entry_owner = head.entries(tokens[0], owner, len(rows), m)
            entries.append(vectors.numpy())
            owners.append(entry_owner.numpy() + start)
    return DualEncoder(backbone, head, [d.doc_id for d in documents], np.concatenate(entries),
                       np.concatenate(owners), max_length, name or f"me-{m}")


def sum_of_max(query_tokens: torch.Tensor, doc_tokens: torch.Tensor, doc_owner: torch.Tensor,
               n_docs: int) -> torch.Tensor:
    """Late-interaction scores: for each document, sum over query tokens of the max inner product with its tokens.

    Args:
        query_tokens: (n_query_tokens, dim) float32.
        doc_tokens: (n_doc_tokens, dim) float32 of n_docs documents, packed.
        doc_owner: (n_doc_tokens,) int64 document of each token.
    Returns:
        (n_docs,) float32; a document without tokens scores -inf.

    Examples:
        >>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]]); d = torch.tensor([[2.0, 1.0], [0.0, 3.0]])
        >>> sum_of_max(q, d, torch.tensor([0, 0]), 1)
        tensor([5.])
    """
    similarity = query_tokens @ doc_tokens.t()
    best = torch.full((query_tokens.shape[0], n_docs), float("-inf"))
    best = best.scatter_reduce(1, doc_owner.expand(query_tokens.shape[0], -1), similarity, "amax", include_self=True)
    return best.sum(dim=0)


class SumOfMaxReranker:
    """Sum-of-max re-ranking of a first stage's candidates (Luan §6.1; ColBERT without its projection).

    Token states may pass through a `token_transform` (token-wise whitening or a flow, Jung et al. §4) and are
    L2-normalized when `normalize` (cosine, as ColBERT and Jung et al. Eq. 1; Luan use raw inner products).
    `search` re-ranks the first stage's top `depth`, so it is a `Retriever` like any other.

    Examples:
        >>> from uhdsearch.types import Document
        >>> docs = [Document("d1", "Vitamin D supplements and bone mineral density"),
        ...         Document("d2", "Sequencing the mouse genome"), Document("d3", "Heart failure after cardiac surgery")]
        >>> from uhdsearch.baselines.bm25 import BM25Retriever
        >>> bm25 = BM25Retriever.build(docs, show_progress=False)
        >>> som = SumOfMaxReranker.build(docs, Backbone.from_pretrained(), first_stage=bm25, show_progress=False)
        >>> som.search({"q1": "does vitamin d strengthen bones"}, k=2).doc_ids("q1")[0]
        'd1'
    """

    def __init__(self, backbone: Backbone, doc_ids: Sequence[str], doc_tokens: torch.Tensor, offsets: np.ndarray,
                 first_stage: Retriever | None = None, depth: int = 100, token_transform: TokenTransform | None = None,
                 normalize: bool = True, query_max_length: int = 256, name: str = "sum-of-max") -> None:
        if offsets.shape[0] != len(doc_ids) + 1 or int(offsets[-1]) != doc_tokens.shape[0]:
            raise UsageError(f"offsets ({offsets.shape[0]}) and tokens ({doc_tokens.shape[0]}) do not match "
                             f"{len(doc_ids)} documents")
        self.backbone = backbone
        self.doc_ids = list(doc_ids)
        self.doc_tokens = doc_tokens
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.first_stage = first_stage
        self.depth = depth
        self.token_transform = token_transform
        self.normalize = normalize
        self.query_max_length = query_max_length
        self.name = name
        self._row = {doc_id: i for i, doc_id in enumerate(self.doc_ids)}

    @classmethod
    def build(
        cls, corpus: Mapping[str, Document] | Sequence[Document], backbone: Backbone,
        first_stage: Retriever | None = None, states: TokenStates | None = None,
        token_transform: TokenTransform | None = None, normalize: bool = True, depth: int = 100,
        max_length: int = 256, name: str = "sum-of-max", show_progress: bool = True,
    ) -> SumOfMaxReranker:
        """Keep every document's last-layer token states (transformed, normalized, bfloat16) for re-ranking.

        Args:
            first_stage: any `Retriever` (``search(queries, k) -> Run``); needed by `search`, not by `rerank`.
            states: backbone states of the corpus documents including the last layer; computed if None.
        """
        documents, states = corpus_states(backbone, corpus, states, max_length, show_progress)
        source = states.layer(backbone.n_layers)
        chunks = []
        with torch.no_grad():
            for start in range(0, source.shape[0], 65_536):
                chunks.append(_prepare(source[start : start + 65_536].float(), token_transform, normalize)
                              .to(torch.bfloat16))
        return cls(backbone, [d.doc_id for d in documents], torch.cat(chunks), states.offsets, first_stage, depth,
                   token_transform, normalize, max_length, name)

    def _query_tokens(self, texts: Sequence[str]) -> list[torch.Tensor]:
        last = self.backbone.n_layers
        states = compute_token_states(self.backbone, texts, [last], self.query_max_length, show_progress=False)
        tokens = _prepare(states.layer(last).float(), self.token_transform, self.normalize)
        return [tokens[states.offsets[i] : states.offsets[i + 1]] for i in range(states.n)]

    def rerank(self, queries: Mapping[str, str] | Sequence[Query], candidates: Run, k: int = 1000) -> Run:
        """Score each query's candidates by sum-of-max and keep the best k (ties: corpus order).

        Candidates unknown to this index are dropped with one warning; a query without candidates gets [].
        """
        run, live = start_run(queries, k, self.name)
        live = [q for q in live if candidates.results.get(q.query_id)]
        if not live:
            return run
        unknown = 0
        with torch.no_grad():
            for q, q_tokens in zip(live, self._query_tokens([q.text for q in live])):
                rows = [self._row[h.doc_id] for h in candidates[q.query_id] if h.doc_id in self._row]
                unknown += len(candidates[q.query_id]) - len(rows)
                rows = np.unique(rows)  # doc-number order, so equal scores keep corpus order
                if not rows.size:
                    continue
                lengths = self.offsets[rows + 1] - self.offsets[rows]
                index = np.concatenate([np.arange(self.offsets[r], self.offsets[r + 1]) for r in rows])
                owner = torch.from_numpy(np.repeat(np.arange(rows.size), lengths))
                scores = sum_of_max(q_tokens, self.doc_tokens[torch.from_numpy(index)].float(), owner, rows.size)
                numbers, values = top_k(scores.numpy(), min(k, rows.size), positive_only=False)
                run.results[q.query_id] = [ScoredDoc(self.doc_ids[rows[n]], float(v)) for n, v in zip(numbers, values)]
        if unknown:
            logger.warning("%d candidates are not in this index and were dropped", unknown)
        return run

    def search(self, queries: Mapping[str, str] | Sequence[Query], k: int = 1000) -> Run:
        """Re-rank the first stage's top `depth` (so at most `depth` results per query)."""
        check_k(k)
        if self.first_stage is None:
            raise UsageError("this sum-of-max model has no first stage; build it with first_stage=... or use rerank")
        queries = as_queries(queries)
        return self.rerank(queries, self.first_stage.search(queries, k=self.depth), k)


def _prepare(tokens: torch.Tensor, transform: TokenTransform | None, normalize: bool) -> torch.Tensor:
    if transform is not None:
        tokens = transform(tokens)
    return torch.nn.functional.normalize(tokens, dim=1) if normalize else tokens

