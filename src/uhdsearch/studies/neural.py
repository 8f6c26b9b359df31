"""One backbone pass, every neural system of the index-size study: the shipped dense model (mean pooling),
DE-k heads at several widths and the shipped UHD model (binary and weighted), encoded chunk by chunk into a
cache so a long encoding resumes where it stopped."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

logger = logging.getLogger(__name__)

DENSE = "dense"  # the backbone as shipped: mean pooling, full width


class NeuralSystems:
    """The shipped UHD model, its backbone as the dense model, and DE-k heads trained on the source collection.

    Attributes:
        model: The UHDEncoder (its backbone is everybody's backbone).
        heads: "de-128" -> trained DualEncoderHead, ...
        widths: system name -> vector width (dense systems only).
    """

    def __init__(self, model, heads: dict[str, Any]) -> None:
        self.model, self.heads = model, heads
        self.backbone = model.backbone
        self.last = self.backbone.n_layers
        self.widths = {DENSE: self.backbone.hidden_size, **{n: h.dim for n, h in heads.items()}}
        self.encoded: dict[str, list[float]] = {}  # desc -> [texts encoded in this process, seconds]

    @property
    def dense_names(self) -> list[str]:
        return list(self.widths)

    @classmethod
    def load(cls, model_dir: Path | Any, train_data, de_widths: list[int | None], cache_dir: Path,
             max_train_documents: int, seed: int) -> NeuralSystems:
        """Load the UHD model (a directory, or a loaded UHDEncoder); train (or load from `cache_dir`) one DE head per
        width on `train_data`'s qrels plus ICT pairs of its judged documents and a seeded sample of other
        documents, up to `max_train_documents`."""
        from safetensors.torch import load_file, save_file

        from uhdsearch.experiments.builders import build_de
        from uhdsearch.encoder.model import UHDEncoder
        from uhdsearch.encoder.states import compute_token_states

        model = model_dir if isinstance(model_dir, UHDEncoder) else UHDEncoder.from_pretrained(model_dir).eval()
        heads, states = {}, None
        bb = model.backbone  # heads belong to one backbone: its shape names the cache file
        for width in de_widths:
            name = f"de-{width or 'full'}"
            path = cache_dir / f"{name}-{seed}-{max_train_documents}-l{bb.n_layers}h{bb.hidden_size}.safetensors"
            if path.is_file():
                from uhdsearch.baselines.dual_encoder import DualEncoderHead

                head = DualEncoderHead(model.backbone.hidden_size, width, "mean", seed=seed)
                head.load_state_dict(load_file(path))
            else:
                documents = _training_documents(train_data, max_train_documents, seed)
                if states is None:  # one backbone pass shared by every width
                    states = compute_token_states(model.backbone, [d.full_text for d in documents],
                                                  [model.backbone.n_layers], 256, desc="DE training documents")
                logger.info("training %s on %d documents", name, len(documents))
                head = build_de(documents, train_data.queries, train_data.qrels, model.backbone, states,
                                dim=width, show_progress=True).embed_query
                save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(path))
            heads[name] = head.eval()
        return cls(model, heads)

    def encode(self, texts: list[str], kind: str) -> dict[str, Any]:
        """Every system's vectors of `texts`: dense ones (n, width) float32 unit rows; "uhd" a CSR matrix."""
        import torch

        from uhdsearch.baselines.dense import mean_pool
        from uhdsearch.baselines.dual_encoder import embed_states
        from uhdsearch.encoder.states import compute_token_states

        cfg = self.model.config
        layers = sorted(set(self.model.layers) | {self.last})
        states = compute_token_states(self.backbone, texts, layers, 256, show_progress=False)
        out: dict[str, Any] = {DENSE: mean_pool(states, self.last)}
        with torch.no_grad():
            for name, head in self.heads.items():
                out[name] = embed_states(head, states, self.last)
        if kind == "query":  # queries are cut at the model's query length before the UHD head
            states = compute_token_states(self.backbone, texts, list(self.model.layers), cfg.query_max_length,
                                          show_progress=False)
        out["uhd"] = self.model.encode_states(states, kind, show_progress=False).buckets[0]
        return out

    def encode_cached(self, texts: list[str], kind: str, directory: Path, chunk: int = 1000,
                      desc: str = "encode") -> list[Path]:
        """`encode` in chunks of `chunk` texts, each saved under `directory` (a rerun keeps the saved ones);
        returns the chunk files, to read one at a time with `load_part` (a million texts do not fit in memory)."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for start in tqdm(range(0, len(texts), chunk), desc=desc, unit="chunk"):
            path = directory / f"{start:09d}-{min(len(texts), start + chunk):09d}.npz"
            if not path.is_file():
                began = time.perf_counter()
                _save(path, self.encode(texts[start:start + chunk], kind))
                done = self.encoded.setdefault(desc, [0, 0.0])
                done[0] += len(texts[start:start + chunk])
                done[1] += time.perf_counter() - began
            paths.append(path)
        return paths


def _training_documents(train_data, limit: int, seed: int):
    """Up to `limit` documents: judged ones of the train queries first, then a seeded sample of the others."""
    judged = {d for rel in train_data.qrels.values() for d, g in rel.items() if g > 0}
    documents = [d for i, d in train_data.corpus.items() if i in judged][:limit]
    others = [d for i, d in train_data.corpus.items() if i not in judged]
    extra = max(0, limit - len(documents))
    order = np.random.default_rng(seed).permutation(len(others))[:extra]
    return documents + [others[i] for i in sorted(order)]


def _save(path: Path, encoded: dict[str, Any]) -> None:
    uhd = encoded["uhd"]
    arrays = {k: v for k, v in encoded.items() if k != "uhd"}
    arrays.update(uhd_data=uhd.data, uhd_indices=uhd.indices, uhd_indptr=uhd.indptr,
                  uhd_shape=np.array(uhd.shape))
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def load_part(path: Path) -> dict[str, Any]:
    """One chunk file of `NeuralSystems.encode_cached`: dense arrays and the "uhd" CSR matrix."""
    with np.load(path, allow_pickle=False) as f:
        out = {k: f[k] for k in f.files if not k.startswith("uhd_")}
        out["uhd"] = sp.csr_matrix((f["uhd_data"], f["uhd_indices"], f["uhd_indptr"]), shape=tuple(f["uhd_shape"]))
    return out


def stack(paths: list[Path]) -> dict[str, Any]:
    """Chunk files joined into one set of vectors per system."""
    parts = [load_part(p) for p in paths]
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "uhd"}
    out["uhd"] = sp.vstack([p["uhd"] for p in parts], format="csr")
    return out


def uhd_scores(queries: sp.csr_matrix, documents: sp.csr_matrix, variant: str) -> np.ndarray:
    """(n_queries, n_docs) UHD scores: shared active dims (binary) or the dot product (weighted)."""
    if variant == "binary":
        queries, documents = _binary(queries), _binary(documents)
    return (queries.astype(np.float64) @ documents.astype(np.float64).T).toarray()


def _binary(m: sp.csr_matrix) -> sp.csr_matrix:
    m = m.copy()
    m.data = (m.data != 0).astype(np.float32)
    return m
