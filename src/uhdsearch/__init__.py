"""uhdsearch: ultra-high dimensional sparse (UHD-BERT) retrieval with binarized inverted indexes.

Heavy modules (torch, transformers) load on first use of a name, so `import uhdsearch` stays fast.
"""
from __future__ import annotations

import importlib
from typing import Any

from uhdsearch import _moved
from uhdsearch._version import __version__

_moved.install()  # deprecated aliases of the modules moved in issues 15 and 34 (CHANGELOG.md)

_EXPORTS = {
    "EncoderConfig": "uhdsearch.encoder.config",
    "UHDEncoder": "uhdsearch.encoder.model",
    "BinaryIndex": "uhdsearch.index.inverted",
    "WeightedIndex": "uhdsearch.index.inverted",
    "Searcher": "uhdsearch.search.searcher",
    "SearchOptions": "uhdsearch.search.options",
    "open_index": "uhdsearch.index.opener",
    "open_query_encoder": "uhdsearch.encoder.query",
    "Retriever": "uhdsearch.types",
    "BM25Retriever": "uhdsearch.baselines.bm25",
    "DenseRetriever": "uhdsearch.baselines.dense",
    "load_beir": "uhdsearch.evaluation.datasets",
    "evaluate": "uhdsearch.evaluation.metrics",
    "compare": "uhdsearch.evaluation.experiment",
    "TrainingArgs": "uhdsearch.training.trainer",
    "Run": "uhdsearch.types",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'uhdsearch' has no attribute {name!r}")
