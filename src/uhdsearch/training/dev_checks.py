"""Dev checks: nDCG@10 of UHD-binary on held-out train queries, computed only from what the new head changes.

A recipe checks its model many times (at step 0, every `eval_every` steps, then for each head and query token
limit). With the backbone frozen, what does not change between checks is computed once: the dev documents' token
states (the caller's TokenStates) and the dev queries' backbone outputs (remembered per token limit). A check then
runs only the WTA heads. A head seen before (the untrained start, the kept step, when the choice of query limit
checks them again) is not re-encoded at all: its documents' encoding is remembered by a fingerprint of the
weights, for the first head and the best-scoring ones.
"""
from __future__ import annotations

import hashlib
import random
import sys
import time
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from uhdsearch.encoder.backbone import hash_state
from uhdsearch.encoder.states import TokenStates
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.search.searcher import Searcher
from uhdsearch.sparse import SparseEncoding
from uhdsearch.types import Document, Qrels, Query

DevSplit = tuple[list[Query], Qrels]
KEPT_HEADS = 4  # document encodings remembered: the first head's and the best-scoring others'


class _RememberedBackbone:
    """The frozen backbone as an encoder's `runner`: each distinct batch of token ids runs through it once."""

    def __init__(self, model) -> None:
        self.model = model
        self._outputs: dict[tuple, list[torch.Tensor]] = {}

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, layers) -> list[torch.Tensor]:
        key = (tuple(input_ids.shape), input_ids.numpy().tobytes(), attention_mask.numpy().tobytes(), tuple(layers))
        if key not in self._outputs:
            self._outputs[key] = self.model.backbone(input_ids, attention_mask, layers)
        return self._outputs[key]


class _DevQueries:
    """What Searcher needs of an encoder, with the dev queries' backbone pass remembered."""

    def __init__(self, model) -> None:
        self.model, self.runner = model, _RememberedBackbone(model)

    @property
    def config(self):
        return self.model.config

    def digest(self) -> str:
        return self.model.digest()

    def encode(self, texts: Sequence[str], kind: str) -> SparseEncoding:
        return self.model.encode(texts, kind, runner=self.runner)


class DevCheck:
    """Callable(model) -> dev nDCG@10, as the trainer's `eval_fn`; see the module docstring.

    states: the documents' token states at the model's bucket layers (or at the input of training top layers);
    None re-encodes from text every time (the whole backbone trains, so nothing can be remembered).
    frozen_backbone: the backbone never changes, so the dev queries' pass through it is remembered.
    length_norm: 0 scores plain counts, the model's own score; alpha > 0 the length-normalized search score.
    """

    def __init__(self, states: TokenStates | None, documents: Sequence[Document], dev: DevSplit,
                 n_documents: int = 1_000, length_norm: float = 0.0, frozen_backbone: bool = False,
                 show_progress: bool = False) -> None:
        self.states, self.documents, self.length_norm = states, documents, length_norm
        self.frozen_backbone = frozen_backbone
        self.queries, self.qrels = dev
        judged = {d for rel in self.qrels.values() for d in rel}
        rows = [i for i, d in enumerate(documents) if d.doc_id in judged]
        others = [i for i, d in enumerate(documents) if d.doc_id not in judged]
        self.rows = sorted(rows + random.Random(0).sample(others, max(0, min(len(others), n_documents - len(rows)))))
        self.doc_ids = [documents[i].doc_id for i in self.rows]
        self.show_progress = show_progress
        self._heads: dict[str, tuple[float, BinaryIndex]] = {}  # fingerprint -> (score, index of its encoding)
        self._first: str | None = None
        self._queries: dict[int, _DevQueries] = {}  # per model object, its remembered backbone
        self.seconds: list[float] = []  # wall time of each check, for the recipe's record

    def __call__(self, model) -> float:
        start = time.perf_counter()
        fingerprint = self._fingerprint(model) if self.states is not None else None
        known = self._heads.get(fingerprint) if fingerprint else None
        index = known[1] if known else BinaryIndex.from_encoding(self._encode_documents(model), self.doc_ids, None)
        # every dim; plain counts (the model's own score, as training sees it) unless asked otherwise
        searcher = Searcher(self._encoder(model), index, "binary", max_df=None, length_norm=self.length_norm or None)
        score = evaluate(searcher.search(self.queries, k=100), self.qrels, ["nDCG@10"])["nDCG@10"]
        if fingerprint and not known:
            self._remember(fingerprint, score, index)
        self.seconds.append(time.perf_counter() - start)
        return score

    def _encode_documents(self, model) -> SparseEncoding:
        if self.states is not None:
            return model.encode_states(self.states, show_progress=self.show_progress, rows=self.rows,
                                       desc="dev check: documents")
        return model.encode_document([self.documents[i].full_text for i in self.rows], show_progress=self.show_progress)

    def _encoder(self, model):
        if not self.frozen_backbone:  # the backbone trains: its outputs change with every step
            return model
        if id(model) not in self._queries or self._queries[id(model)].model is not model:
            self._queries = {id(model): _DevQueries(model)}
        return self._queries[id(model)]

    def _fingerprint(self, model) -> str:
        """The weights and settings a document encoding depends on (not the query token limit)."""
        h = hashlib.blake2b(digest_size=16)
        h.update(repr(model.config.replace(query_max_length=2, query_k=None)).encode())
        state = model.state_dict()
        if self.frozen_backbone:  # it cannot change: hashing its ~90 MB each check would cost seconds
            state = {k: v for k, v in state.items() if not k.startswith("backbone.")}
        hash_state(h, state)
        return h.hexdigest()

    def _remember(self, fingerprint: str, score: float, index: BinaryIndex) -> None:
        if self._first is None:
            self._first = fingerprint
        self._heads[fingerprint] = (score, index)
        others = sorted((k for k in self._heads if k != self._first), key=lambda k: -self._heads[k][0])
        for stale in others[KEPT_HEADS - 1:]:
            del self._heads[stale]


def announce(label: str, score: float, seconds: float) -> None:
    """One line per finished check on stderr, beside the progress bars."""
    tqdm.write(f"{label}: dev nDCG@10 {score:.4f} ({seconds:.1f} s)", file=sys.stderr)
