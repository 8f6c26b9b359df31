"""UHDEncoder: backbone + WTA buckets; encode_query / encode_document; save_pretrained / from_pretrained."""
from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm

from uhdsearch.encoder.backbone import Backbone, hash_state, tokenize_texts
from uhdsearch.encoder.buckets import Buckets
from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.device import resolve_device
from uhdsearch.encoder.modes import evaluating
from uhdsearch.encoder.onnx_backbone import OnnxBackbone
from uhdsearch.encoder.precision import product_dtype
from uhdsearch.encoder.states import TokenStates, compute_token_states
from uhdsearch.encoder.top_layers import bucket_token_states
from uhdsearch.errors import ModelFormatError, UsageError
from uhdsearch.io import atomic_directory, read_json, recover_directory, write_json
from uhdsearch.sparse import SparseEncoding
from uhdsearch.types import check_k

logger = logging.getLogger(__name__)

CONFIG_FILE = "uhd_config.json"
WTA_FILE = "wta.safetensors"
Kind = Literal["query", "document"]
_PLURAL = {"query": "queries", "document": "documents"}


class UHDEncoder(nn.Module):
    """The UHD-BERT encoder (paper §3.2-3.5): shared weights for queries and documents."""

    def __init__(self, backbone: Backbone, config: EncoderConfig, initialize: bool = True) -> None:
        super().__init__()
        self.backbone = backbone
        self.config = config
        self.layers = [backbone.resolve_layer(layer) for layer in config.bucket_layers]
        if len(set(self.layers)) != len(self.layers):
            raise UsageError(f"bucket_layers {list(config.bucket_layers)} name the same layer twice")
        self.buckets = Buckets(self.layers, backbone.hidden_size, config.dim, config.weight_sparsity, config.seed,
                               initialize)
        self._digest: str | None = None
        # Optional per-layer maps of backbone token states applied before the WTA layer (e.g. whitening,
        # baselines/whitening.py); absolute layer -> callable. Not saved by save_pretrained, not in the digest.
        self.state_transforms: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {}
        # (runner, the backbone exported, its parameters, their versions then)
        self._onnx: tuple[OnnxBackbone, Backbone, tuple[torch.Tensor, ...], tuple[int, ...]] | None = None
        self._onnx_threads: int | None = None

    @classmethod
    def new(cls, backbone_dir: str | os.PathLike | None = None, config: EncoderConfig | None = None) -> UHDEncoder:
        """A freshly initialised encoder on a local backbone (default: bundled all-MiniLM-L6-v2).

        Examples:
            >>> from uhdsearch.encoder.config import EncoderConfig
            >>> enc = UHDEncoder.new(config=EncoderConfig(dim=1024, wta_k=8, query_k=None))
            >>> bool(enc.encode_query(["what is sparse retrieval"]).active_per_row()[0, 0] > 0)
            True
        """
        return cls(Backbone.from_pretrained(backbone_dir), config or EncoderConfig())

    # ---------------------------------------------------------------- encoding
    def forward(self, texts: Sequence[str], kind: Kind, wta_k: int | None = None) -> list[torch.Tensor]:
        """Per bucket, (len(texts), dim) pooled unit vectors; differentiable (used in training)."""
        max_length = self.config.query_max_length if kind == "query" else self.config.document_max_length
        batch = self.backbone.tokenize(list(texts), max_length)
        return self._encode_batch(batch["input_ids"], batch["attention_mask"], wta_k)

    @property
    def device(self) -> torch.device:
        """Where the weights are and encoding runs (`to_device`); the CPU unless moved."""
        return next(iter(self.buckets.wta.values())).weight.device

    def to_device(self, device: str | torch.device, option: str = "device") -> UHDEncoder:
        """Move the encoder to `device` ("cpu", "cuda", "cuda:1", "mps"); returns self.

        Encoding then runs the backbone and the WTA layer there on each batch, and only the sparse winners come
        back to the host as CSR; the results equal the CPU's up to float tolerance (GPU kernels sum in other
        orders). The digest is unchanged: it reads the same weights. Encoding from cached states whose top
        layers train (`forward_states` below the buckets) stays on the CPU.

        Raises:
            UsageError: naming `option`, when this machine has no such device or the ONNX runtime is on (it runs
                on the CPU only).
        """
        resolved = resolve_device(device, option)
        if resolved.type != "cpu" and self._onnx is not None:
            raise UsageError(f"{option}={str(device)!r}: the ONNX runtime backbone runs on the CPU only; turn it "
                             "off (use_onnx_runtime(False)) to encode on a GPU")
        self.to(resolved)
        return self

    def use_onnx_runtime(self, enabled: bool = True, threads: int | None = None) -> None:
        """Run the backbone through ONNX Runtime whenever no gradient is needed (inference encoding).

        Same float32 graph (token states agree within ~1e-5), about 2x faster for short queries on a CPU.
        The graph is exported from the current weights (~3 s) and re-exported when they change in place
        (optimizer steps, load_state_dict) or the backbone is replaced; after replacing single parameter objects
        (load_state_dict(assign=True)), call this again.
        """
        if enabled and self.device.type != "cpu":
            raise UsageError(f"the ONNX runtime backbone runs on the CPU only; this encoder is on {self.device}")
        self._onnx_threads = threads
        self._onnx = None
        if enabled:
            # The parameter list is kept: walking the module tree on every query cost ~0.5 ms.
            parameters = tuple(self.backbone.parameters())
            self._onnx = (OnnxBackbone(self.backbone, self.layers, threads), self.backbone, parameters,
                          tuple(p._version for p in parameters))

    def __getstate__(self) -> dict:
        # An ONNX Runtime session cannot be copied: a deep copy runs on PyTorch until enabled again.
        return {**super().__getstate__(), "_onnx": None}

    def backbone_runner(self) -> Callable[..., list[torch.Tensor]]:
        """What computes the backbone's states now: the ONNX Runtime session where `use_onnx_runtime` enabled it
        and no gradient is wanted (exported again after the weights changed), else the PyTorch backbone. Called as
        `runner(input_ids, attention_mask, layers)` -> one (n_texts, length, hidden) tensor per layer."""
        if self._onnx is None or torch.is_grad_enabled():
            return self.backbone
        runner, backbone, parameters, versions = self._onnx
        # In-place updates (optimizer steps, load_state_dict) bump a tensor's version counter.
        if backbone is not self.backbone or any(p._version != v for p, v in zip(parameters, versions)):
            logger.info("backbone weights changed: exporting the ONNX graph again")
            self.use_onnx_runtime(True, self._onnx_threads)
            runner = self._onnx[0]
        return runner

    _backbone_runner = backbone_runner  # the former private name, still asked for by serving/explain.py

    def _encode_batch(self, input_ids, attention_mask, wta_k: int | None, sparse: bool = False,
                      runner: Callable[..., list[torch.Tensor]] | None = None) -> list:
        device = self.device  # no copy when already there (the CPU)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        states = (runner or self.backbone_runner())(input_ids, attention_mask, self.layers)
        n_texts, length = attention_mask.shape
        if n_texts == 1 or bool(attention_mask.all()):  # no padding (one query): views, no boolean-mask copies
            token_text = torch.arange(n_texts).repeat_interleave(length)
            tokens = [s.reshape(n_texts * length, -1) for s in states]
        else:
            keep = attention_mask.bool()
            token_text = torch.nonzero(keep, as_tuple=True)[0]
            tokens = [s[keep] for s in states]
        return self.pool_tokens(tokens, token_text, n_texts, wta_k, sparse)

    def pool_tokens(self, tokens: list[torch.Tensor], token_text: torch.Tensor, n_texts: int,
                    wta_k: int | None = None, sparse: bool = False) -> list:
        """Buckets from packed token states (one (n_tokens, hidden) tensor per bucket layer).

        sparse: CSR float32 per bucket straight from the winners (inference; encoder/winners.py), else dense
        differentiable rows.
        """
        dtype = product_dtype(self.config.wta_dtype)
        device = self.device  # cached states live on the host
        tokens, token_text = [t.to(device) for t in tokens], token_text.to(device)
        if self.state_transforms:
            tokens = [self.state_transforms[layer](t) if layer in self.state_transforms else t
                      for layer, t in zip(self.layers, tokens)]
        pool = self.buckets.sparse if sparse else self.buckets
        return pool(tokens, token_text, n_texts, wta_k or self.config.wta_k, dtype)

    def forward_states(self, states: TokenStates, rows, drop=None, wta_k: int | None = None) -> list[torch.Tensor]:
        """Differentiable bucket vectors of cached texts; see TokenStates.gather. States of a layer below the
        buckets run the backbone's layers above it (encoder/top_layers.py: training the top layers)."""
        tokens, token_text = bucket_token_states(self.backbone, states, rows, self.layers, drop)
        return self.pool_tokens(tokens, token_text, len(rows), wta_k)

    def encode_states(
        self, states: TokenStates, kind: Kind = "document", batch_size: int = 64, wta_k: int | None = None,
        show_progress: bool = True, rows: Sequence[int] | None = None, desc: str | None = None,
    ) -> SparseEncoding:
        """Encode texts whose backbone states were computed once (compute_token_states); `rows` picks a subset.

        Queries keep the config's query_k top dimensions per bucket.
        """
        check_k(batch_size, "batch_size")
        parts: list[list[sp.csr_matrix]] = [[] for _ in self.layers]
        rows = list(range(states.n)) if rows is None else list(rows)
        with torch.inference_mode():
            for start in tqdm(range(0, len(rows), batch_size), desc=desc or f"encode {_PLURAL[kind]}",
                              disable=not show_progress, leave=False, unit="batch"):
                batch = rows[start : start + batch_size]
                tokens, token_text = bucket_token_states(self.backbone, states, batch, self.layers, None)
                for b, v in enumerate(self.pool_tokens(tokens, token_text, len(batch), wta_k, sparse=True)):
                    parts[b].append(v)
        if not parts[0] or not parts[0][0].shape[0]:
            return SparseEncoding([sp.csr_matrix((0, self.config.dim), dtype=np.float32) for _ in self.layers])
        encoded = SparseEncoding([sp.vstack(p, format="csr") for p in parts])
        if kind == "query":
            encoded = encoded.truncate(self.config.query_k)
        return encoded

    def center_buckets(self, states: TokenStates) -> None:
        """Initialise each bucket's bias from the mean token state of its layer (see WTALayer.center_)."""
        for layer in self.layers:
            transform = self.state_transforms.get(layer)
            if transform is None:
                mean = states.layer(layer).float().mean(dim=0)
            else:  # the WTA layer sees transformed states; chunks bound the float32 copy
                tokens = states.layer(layer)
                mean = sum(transform(tokens[i : i + 65_536].float()).sum(dim=0)
                           for i in range(0, tokens.shape[0], 65_536)) / max(1, tokens.shape[0])
            self.buckets.wta[str(layer)].center_(mean)
        self._digest = None

    def token_states(self, texts: Sequence[str], kind: Kind = "document", batch_size: int = 32,
                     show_progress: bool = True) -> TokenStates:
        """Backbone states of this encoder's bucket layers, to reuse while the backbone is frozen."""
        max_length = self.config.query_max_length if kind == "query" else self.config.document_max_length
        return compute_token_states(self.backbone, texts, self.layers, max_length, batch_size, show_progress,
                                    desc=f"backbone {_PLURAL[kind]}")

    def encode_query(
        self,
        texts: Sequence[str],
        batch_size: int = 64,
        query_k: int | None = None,
        wta_k: int | None = None,
        show_progress: bool = False,
    ) -> SparseEncoding:
        """Encode queries; keep each bucket's top `query_k` dims (Table 4); None: the config's query_k.

        To keep every active dimension whatever the config says, use ``encode(texts, "query")``.
        The result's `truncated` flags the queries cut to ``config.query_max_length`` tokens.
        """
        encoded = self.encode(texts, "query", batch_size, wta_k, show_progress)
        return encoded.truncate(self.config.query_k if query_k is None else query_k)

    def encode_document(
        self, texts: Sequence[str], batch_size: int = 32, wta_k: int | None = None, show_progress: bool = True
    ) -> SparseEncoding:
        """Encode documents into per-bucket sparse vectors, (len(texts), dim) CSR float32 each."""
        return self.encode(texts, "document", batch_size, wta_k, show_progress)

    def encode(self, texts: Sequence[str], kind: Kind, batch_size: int = 64, wta_k: int | None = None,
               show_progress: bool = False, runner: Callable[..., list[torch.Tensor]] | None = None) -> SparseEncoding:
        """Encode texts with no query_k truncation, each tokenized once. `runner(input_ids, attention_mask,
        layers)`, if given, stands in for the backbone (a query student, encoder/query/student.py).

        Returns:
            Per-bucket (len(texts), dim) CSR float32; its `truncated` flags the texts cut to the kind's maximum
            number of tokens (``config.query_max_length`` or ``config.document_max_length``).
        """
        check_k(batch_size, "batch_size")
        texts = list(texts)
        if not texts:
            return SparseEncoding([sp.csr_matrix((0, self.config.dim), dtype=np.float32) for _ in self.layers],
                                  np.zeros(0, dtype=bool))
        with evaluating(self):  # thread-safe, where another thread encodes with this model (encoder/modes.py)
            return self._encode_texts(texts, kind, batch_size, wta_k, show_progress, runner)

    def _encode_texts(self, texts: list[str], kind: Kind, batch_size: int, wta_k: int | None,
                      show_progress: bool, runner: Callable[..., list[torch.Tensor]] | None) -> SparseEncoding:
        max_length = self.config.query_max_length if kind == "query" else self.config.document_max_length
        parts: list[list[sp.csr_matrix]] = [[] for _ in self.layers]
        order: list[np.ndarray] = []
        truncated = np.zeros(len(texts), dtype=bool)
        bar = tqdm(total=len(texts), desc=f"encode {_PLURAL[kind]}", unit="doc" if kind == "document" else "query",
                   disable=not show_progress, leave=False)
        try:
            with torch.inference_mode():
                for positions, batch in self._length_sorted_batches(texts, max_length, batch_size, truncated):
                    vectors = self._encode_batch(batch["input_ids"], batch["attention_mask"], wta_k, sparse=True,
                                                 runner=runner)
                    for b, v in enumerate(vectors):
                        parts[b].append(v)
                    order.append(positions)
                    bar.update(len(positions))
        finally:
            bar.close()
        order = np.concatenate(order)
        if len(parts[0]) == 1 and np.array_equal(order, np.arange(len(texts))):  # one batch in order (a query)
            return SparseEncoding([p[0] for p in parts], truncated)
        inverse = np.argsort(order, kind="stable")
        return SparseEncoding([sp.vstack(p, format="csr")[inverse] for p in parts], truncated)

    def _length_sorted_batches(self, texts, max_length: int, batch_size: int,
                               truncated: np.ndarray) -> Iterator[tuple[np.ndarray, dict]]:
        # Batching texts of similar length avoids computing padding, about 1.5x faster on real corpora.
        tokenizer = self.backbone.tokenizer
        tokenized = tokenize_texts(tokenizer, texts, truncation=True, max_length=max_length)
        ids = tokenized["input_ids"]
        # A fast tokenizer keeps what truncation cut off; Backbone.from_pretrained insists on a fast one.
        truncated[:] = [bool(e.overflowing) for e in tokenized.encodings]
        lengths = np.array([len(x) for x in ids])
        order = np.argsort(-lengths, kind="stable")
        for start in range(0, len(texts), batch_size):
            positions = order[start : start + batch_size]
            if len(positions) == 1:  # one query: no padding, and tokenizer.pad costs more than the tensors
                input_ids = torch.tensor([ids[positions[0]]])
                yield positions, {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
                continue
            batch = tokenizer.pad({"input_ids": [ids[i] for i in positions]}, return_tensors="pt")
            yield positions, batch

    # ---------------------------------------------------------------- scoring (training)
    def relevance(self, queries: list[torch.Tensor], documents: list[torch.Tensor]) -> torch.Tensor:
        """Eq. 7: sum over buckets of weight * (queries @ documents.T); (n_queries, n_docs)."""
        weights = self.config.weights
        return sum(w * q @ d.t() for w, q, d in zip(weights, queries, documents))

    # ---------------------------------------------------------------- identity
    def digest(self) -> str:
        """Fingerprint of the config and every weight; indexes record it to detect a model swap."""
        if self._digest is None:
            h = hashlib.blake2b(digest_size=16)
            # Not the version of uhdsearch that loads it: the same weights keep their digest across releases.
            config = {k: v for k, v in self.config.to_json().items() if k != "uhdsearch_version"}
            h.update(repr(sorted(config.items())).encode())
            hash_state(h, self.state_dict())
            self._digest = h.hexdigest()
        return self._digest

    def train(self, mode: bool = True):  # noqa: D401 - torch API
        self._digest = None  # weights may change while training
        return super().train(mode)

    # ---------------------------------------------------------------- persistence
    def save_pretrained(self, directory: str | os.PathLike, overwrite: bool = False, model_card: str | None = None) -> None:
        """Write backbone (Hugging Face format), uhd_config.json and wta.safetensors atomically."""
        with atomic_directory(directory, overwrite=overwrite) as tmp:
            self.backbone.save_pretrained(tmp)
            tensors = {}
            for layer in self.layers:
                wta = self.buckets.wta[str(layer)]
                tensors[f"buckets.{layer}.weight"] = wta.weight.detach().contiguous()
                tensors[f"buckets.{layer}.bias"] = wta.bias.detach().contiguous()
                tensors[f"buckets.{layer}.mask"] = wta.mask.contiguous()
            save_file(tensors, str(Path(tmp) / WTA_FILE))
            meta = self.config.to_json()
            meta["bucket_layers_absolute"] = self.layers
            self._digest = None  # weights may have changed since the digest was cached
            meta["digest"] = self.digest()
            write_json(Path(tmp) / CONFIG_FILE, meta)
            if model_card:
                (Path(tmp) / "README.md").write_text(model_card, encoding="utf-8")

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, **overrides) -> UHDEncoder:
        """Load a saved encoder; `overrides` change inference-time fields such as wta_k or query_k.

        Raises:
            FileNotFoundError: no such directory.
            ModelFormatError: not a uhdsearch model, or its files disagree.
        """
        directory = recover_directory(directory)  # a swap cut short by a kill (uhdsearch.io.atomic_directory)
        if not directory.is_dir():
            raise FileNotFoundError(f"no model directory at {directory}")
        if not (directory / CONFIG_FILE).is_file():
            raise ModelFormatError(f"not a uhdsearch model: {directory} has no {CONFIG_FILE}")
        try:
            meta = read_json(directory / CONFIG_FILE)
        except ValueError as exc:
            raise ModelFormatError(str(exc)) from None
        config = EncoderConfig.from_json(meta, str(directory / CONFIG_FILE))
        if overrides:
            allowed = {"wta_k", "query_k", "bucket_weights", "query_max_length", "document_max_length"}
            bad = set(overrides) - allowed
            if bad:
                raise TypeError(f"cannot override {sorted(bad)} at load time; allowed: {sorted(allowed)}")
            config = config.replace(**overrides)
        encoder = cls(Backbone.from_pretrained(directory), config, initialize=False)
        if not (directory / WTA_FILE).is_file():
            raise ModelFormatError(f"{directory} has no {WTA_FILE}")
        try:
            tensors = load_file(str(directory / WTA_FILE))
        except Exception as exc:  # safetensors raises its own error types for corrupt files
            raise ModelFormatError(f"{directory / WTA_FILE} is not a readable safetensors file: {exc}") from exc
        for layer in encoder.layers:
            wta = encoder.buckets.wta[str(layer)]
            for name in ("weight", "bias", "mask"):
                key = f"buckets.{layer}.{name}"
                if key not in tensors:
                    raise ModelFormatError(f"{directory / WTA_FILE} lacks {key}")
                target = getattr(wta, name)
                if tensors[key].is_floating_point() and not torch.isfinite(tensors[key]).all():
                    raise ModelFormatError(f"{directory / WTA_FILE}: {key} holds NaN or infinite values; the model "
                                           "is corrupted (or training diverged)")
                if tuple(tensors[key].shape) != tuple(target.shape):
                    raise ModelFormatError(
                        f"{key} has shape {tuple(tensors[key].shape)} but the config implies {tuple(target.shape)}"
                    )
                with torch.no_grad():
                    target.copy_(tensors[key])
            wta.apply_mask_()
        encoder.eval()
        return encoder


def rows_to_csr(vectors: torch.Tensor) -> sp.csr_matrix:
    """(n, dim) dense rows as host CSR with sorted indices; about 2x faster than scipy's scan of a dense array.

    On a GPU the nonzeros are found there and only they cross to the host (a dense batch is n x 81,920 floats).
    """
    rows, cols = torch.nonzero(vectors, as_tuple=True)
    counts = torch.bincount(rows, minlength=vectors.shape[0]).cpu()
    indptr = np.zeros(vectors.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts.numpy(), out=indptr[1:])
    return sp.csr_matrix((vectors[rows, cols].cpu().numpy(), cols.cpu().numpy().astype(np.int32), indptr),
                         shape=tuple(vectors.shape))
