"""Dense retrieval with the backbone as it ships: mean pooling, cosine, exact inner-product search (faiss)."""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.states import TokenStates
from uhdsearch.errors import UsageError
from uhdsearch.topk import tie_order
from uhdsearch.types import Document, Query, Run, ScoredDoc, start_run

logger = logging.getLogger(__name__)


def mean_pool(states: TokenStates, layer: int) -> np.ndarray:
    """(n, hidden) float32 unit vectors: the mean of each text's token states (sentence-transformers pooling)."""
    tokens = states.layer(layer).float()
    owner = torch.from_numpy(np.repeat(np.arange(states.n), np.diff(states.offsets)))
    sums = torch.zeros(states.n, tokens.shape[1]).index_add_(0, owner, tokens)
    means = sums / torch.from_numpy(np.diff(states.offsets)).clamp_min(1).unsqueeze(1).float()
    return torch.nn.functional.normalize(means, dim=1).numpy().astype(np.float32)


class DenseRetriever:
    """Exact cosine search over mean-pooled backbone embeddings; a `Retriever` (``search(queries, k) -> Run``).

    Examples:
        >>> from uhdsearch.types import Document
        >>> docs = [Document("d1", "Vitamin D supplements and bone mineral density"),
        ...         Document("d2", "Sequencing the mouse genome"), Document("d3", "Heart failure after cardiac surgery")]
        >>> dense = DenseRetriever.build(docs, show_progress=False)   # the bundled MiniLM backbone
        >>> dense.search({"q1": "does vitamin d strengthen bones"}, k=2).doc_ids("q1")[0]
        'd1'
    """

    def __init__(self, backbone: Backbone, doc_ids: list[str], embeddings: np.ndarray, query_max_length: int = 256,
                 name: str = "dense") -> None:
        from uhdsearch._optional import require

        faiss = require("faiss", "dense")
        self.backbone = backbone
        self.doc_ids = doc_ids
        self.query_max_length = query_max_length
        self.name = name
        self.index = faiss.IndexFlatIP(embeddings.shape[1])
        self.index.add(np.ascontiguousarray(embeddings, dtype=np.float32))

    @classmethod
    def build(
        cls, corpus: Mapping[str, Document] | Sequence[Document], backbone: Backbone | str | None = None,
        max_length: int = 256, batch_size: int = 32, states: TokenStates | None = None, show_progress: bool = True,
    ) -> DenseRetriever:
        """Embed `corpus`; reuse precomputed last-layer `states` of the same documents when given."""
        documents = list(corpus.values()) if isinstance(corpus, Mapping) else list(corpus)
        if not documents:
            raise UsageError("the corpus is empty: nothing to index")
        if not isinstance(backbone, Backbone):
            backbone = Backbone.from_pretrained(backbone)
        last = backbone.n_layers
        if states is None or last not in states.layers:
            from uhdsearch.encoder.states import compute_token_states

            states = compute_token_states(backbone, [d.full_text for d in documents], [last], max_length,
                                          batch_size, show_progress, desc="dense documents")
        if states.n != len(documents):
            raise UsageError(f"states cover {states.n} texts but the corpus has {len(documents)} documents")
        return cls(backbone, [d.doc_id for d in documents], mean_pool(states, last), max_length)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        from uhdsearch.encoder.states import compute_token_states

        states = compute_token_states(self.backbone, texts, [self.backbone.n_layers], self.query_max_length,
                                      show_progress=False)
        return mean_pool(states, self.backbone.n_layers)

    def search(self, queries: Mapping[str, str] | Sequence[Query], k: int = 1000) -> Run:
        run, live = start_run(queries, k, self.name)
        if not live:
            return run
        vectors = self.encode_queries([q.text for q in live])
        depth = min(int(k), len(self.doc_ids))
        scores, numbers = self.index.search(vectors, depth)
        for q, row_scores, row_numbers in zip(live, scores, numbers):
            order = tie_order(row_scores, row_numbers)  # faiss orders ties arbitrarily
            run.results[q.query_id] = [ScoredDoc(self.doc_ids[row_numbers[i]], float(row_scores[i]))
                                       for i in order if row_numbers[i] >= 0]
        return run
