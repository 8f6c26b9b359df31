"""A query student: the backbone's embeddings and first layers plus a linear head, distilled to give the backbone's
last-layer token states, so that the model's own WTA head encodes queries at a fraction of the backbone's cost.

The student predicts backbone states, not winners: one student serves every model built on the same backbone with
its buckets on the last layer (the WTA head, its centring and pooling stay the model's). Documents keep the full
encoder. Training: benchmarks/experiments/query_student_gpu.py (label-free: mean squared error against the
backbone's states of corpus sentences encoded as queries).
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import torch
from torch import nn

from uhdsearch.encoder.backbone import Backbone, hash_state
from uhdsearch.encoder.modes import evaluating
from uhdsearch.errors import ModelFormatError, UsageError
from uhdsearch.sparse import SparseEncoding

STUDENT_FORMAT = "uhd-query-student"
STUDENT_FORMAT_VERSION = 1


def backbone_fingerprint(backbone: Backbone) -> str:
    """Fingerprint of the backbone's weights: a student is valid only for the backbone it was distilled from.

    Cached on the backbone while its tensors are unchanged (same storage, same version): hashing MiniLM's 90 MB
    takes ~0.2 s, and loading a student then wrapping it would pay it twice."""
    state = backbone.model.state_dict()
    key = tuple((t.data_ptr(), t._version) for t in state.values())
    cached = getattr(backbone, "_fingerprint", None)
    if cached is None or cached[0] != key:
        h = hashlib.blake2b(digest_size=16)
        hash_state(h, state)
        cached = (key, h.hexdigest())
        backbone._fingerprint = cached
    return cached[1]


class QueryStudent(nn.Module):
    """The backbone's word embeddings (read, not copied or trained) and copies of its position / type embeddings
    and first `layers` layers, then a linear head started at the identity: at initialisation it gives layer
    `layers`'s own states."""

    def __init__(self, backbone: Backbone, layers: int, fingerprint: str | None = None) -> None:
        super().__init__()
        if isinstance(layers, bool) or not isinstance(layers, int) or not 0 < layers < backbone.n_layers:
            raise UsageError(f"layers={layers!r}: a student keeps 1..{backbone.n_layers - 1} of the backbone's "
                             "layers")
        source = backbone.model
        words = source.embeddings.word_embeddings
        # A view of the backbone's weights, not a parameter or submodule: the student's train/eval switches,
        # parameters() and optimizers leave the backbone alone; not saved (persistent=False).
        self.register_buffer("words", words.weight.detach(), persistent=False)
        self.model = copy.deepcopy(source, memo={id(words): None})  # the copy has no word embeddings
        self.model.embeddings.requires_grad_(False)  # position / type embeddings: not trained, not saved
        self.model.encoder.layer = self.model.encoder.layer[:layers]
        self.model.config.num_hidden_layers = layers
        hidden = backbone.hidden_size
        self.head = nn.Linear(hidden, hidden)
        with torch.no_grad():
            self.head.weight.copy_(torch.eye(hidden))
            self.head.bias.zero_()
        self.layers = layers
        self.fingerprint = fingerprint or backbone_fingerprint(backbone)
        self.record: dict = {}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(batch, tokens, hidden) states standing in for the backbone's last layer."""
        embedded = nn.functional.embedding(input_ids.to(self.words.device), self.words)
        return self.head(self.model(inputs_embeds=embedded, attention_mask=attention_mask.to(embedded.device))
                         .last_hidden_state)

    def trained_state(self) -> dict[str, torch.Tensor]:
        """The student's own tensors: its layers and head (the embeddings are the backbone's)."""
        return {k: v for k, v in self.state_dict().items() if k.startswith(("model.encoder.", "head."))}

    def save(self, path: str | os.PathLike) -> Path:
        """Write the layers and head as float16 safetensors, whole or not at all (io.atomic_write_bytes).

        Raises:
            UsageError: a weight is NaN, infinite or beyond float16's range (it would be stored as inf).
        """
        from safetensors.torch import save

        from uhdsearch.io import atomic_write_bytes

        path = Path(path)
        for name, tensor in self.trained_state().items():
            if not bool(torch.isfinite(tensor).all()) or float(tensor.abs().max()) > torch.finfo(torch.float16).max:
                raise UsageError(f"{name} holds NaN, infinite or beyond-float16 values: not saved to {path}")
        tensors = {k: v.detach().to(torch.float16).cpu().contiguous() for k, v in self.trained_state().items()}
        metadata = {"format": STUDENT_FORMAT, "format_version": str(STUDENT_FORMAT_VERSION),
                    "layers": str(self.layers), "backbone": self.fingerprint, "record": json.dumps(self.record)}
        atomic_write_bytes(path, save(tensors, metadata=metadata))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, backbone: Backbone) -> QueryStudent:
        """Read a student saved for `backbone`; a wrong, damaged or foreign file raises ModelFormatError naming it.
        The header is checked before any tensor is read."""
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no query student at {path}")
        try:
            with safe_open(str(path), framework="pt") as f:
                metadata = f.metadata() or {}
                student = cls._checked(path, metadata, backbone)
                expected = student.trained_state()
                if set(f.keys()) != set(expected):
                    raise ModelFormatError(f"{path}: tensors missing {sorted(set(expected) - set(f.keys()))[:3]}, "
                                           f"unexpected {sorted(set(f.keys()) - set(expected))[:3]}")
                for name in f.keys():  # shapes and types from the header, before any tensor is read
                    shape, dtype = list(f.get_slice(name).get_shape()), f.get_slice(name).get_dtype()
                    if shape != list(expected[name].shape) or not dtype.startswith(("F", "BF")):
                        raise ModelFormatError(f"{path}: {name} has shape {tuple(shape)} {dtype}, expected "
                                               f"{tuple(expected[name].shape)} floating point")
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except ModelFormatError:
            raise
        except Exception as exc:  # safetensors raises its own error type for damaged files
            raise ModelFormatError(f"{path} is not a readable safetensors file (truncated or corrupt): {exc}") from None
        for name, tensor in tensors.items():
            if not bool(torch.isfinite(tensor).all()):
                raise ModelFormatError(f"{path}: {name} holds NaN or infinite values")
        student.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=False)
        return student.eval()

    @classmethod
    def _checked(cls, path: Path, metadata: dict, backbone: Backbone) -> QueryStudent:
        """An untrained student of the header's layer count, once format, backbone and record are checked."""
        if metadata.get("format") != STUDENT_FORMAT or metadata.get("format_version") != str(STUDENT_FORMAT_VERSION):
            raise ModelFormatError(f"{path} is not a query student (format {metadata.get('format')!r}, version "
                                   f"{metadata.get('format_version')!r}; expected {STUDENT_FORMAT!r} "
                                   f"{STUDENT_FORMAT_VERSION})")
        fingerprint = backbone_fingerprint(backbone)
        if metadata.get("backbone") != fingerprint:
            raise ModelFormatError(f"{path} was distilled from backbone {metadata.get('backbone')!r}, not this "
                                   f"model's ({fingerprint})")
        layers = metadata.get("layers", "")
        if not (layers.isascii() and layers.isdecimal()) or not 0 < int(layers) < backbone.n_layers:
            raise ModelFormatError(f"{path}: layers {layers!r} is not 1..{backbone.n_layers - 1}")
        try:
            record = json.loads(metadata.get("record", "{}"))
        except json.JSONDecodeError as exc:
            raise ModelFormatError(f"{path}: its training record is not JSON: {exc}") from None
        if not isinstance(record, dict):
            raise ModelFormatError(f"{path}: its training record is {type(record).__name__}, not a JSON object")
        student = cls(backbone, int(layers), fingerprint)
        student.record = record
        return student


class StudentQueryEncoder:
    """Queries encoded as ``model.encode(texts, "query")`` encodes them, with the student's states in place of
    the backbone's last layer; `config`, `digest()` and `encode(texts, "query")` as UHDEncoder's, so a Searcher or
    the service takes it as its query encoder. Documents are encoded with the full model.

    Examples:
        >>> from uhdsearch.encoder.config import EncoderConfig
        >>> from uhdsearch.encoder.model import UHDEncoder
        >>> model = UHDEncoder.new(config=EncoderConfig(dim=1024, wta_k=8, query_k=None))
        >>> queries = StudentQueryEncoder(model, QueryStudent(model.backbone, 2)).encode(["bone density"], "query")
        >>> queries.buckets[0].shape, queries.buckets[0].nnz > 0
        ((1, 1024), True)
    """

    def __init__(self, model, student: QueryStudent, onnx: bool = False, threads: int | None = None) -> None:
        last = model.backbone.n_layers
        if list(model.layers) != [last]:
            raise UsageError(f"a query student stands in for the backbone's last layer ({last}); this model's "
                             f"buckets are on layers {list(model.layers)}")
        if student.fingerprint != backbone_fingerprint(model.backbone):
            raise UsageError("this query student was distilled from another backbone than the model's")
        if onnx and model.device.type != "cpu":
            raise UsageError(f"the ONNX runtime runs on the CPU only; this model is on {model.device}")
        self.model, self.student, self.config = model, student.to(model.device), model.config
        self._runner = None
        if onnx:
            from uhdsearch.encoder.onnx_backbone import OnnxModule

            example = model.backbone.tokenize(["an example query", "a second, somewhat longer query"], 16)
            self._runner = OnnxModule(self.student, example, threads)

    def digest(self) -> str:
        """The model's digest: indexes built by the model accept these queries."""
        return self.model.digest()

    def states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self._runner is not None:
            return self._runner(input_ids, attention_mask)[0]
        return self.student(input_ids.to(self.model.device), attention_mask.to(self.model.device))

    def _run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, layers: list[int]) -> list[torch.Tensor]:
        return [self.states(input_ids, attention_mask)]  # the one (last) layer's states, as the backbone gives them

    def encode(self, texts, kind: str = "query", batch_size: int = 64, wta_k: int | None = None,
               **_) -> SparseEncoding:
        """Every active dimension of each query (the config's query_k applies where UHDEncoder applies it);
        `wta_k` as UHDEncoder.encode's: the model's own encode, with the student standing in for the backbone."""
        if kind != "query":
            raise UsageError("a query student encodes queries only; encode documents with the full model")
        # eval mode for this pass only, under encoder/modes.py's lock: a training student keeps training
        with evaluating(self.student):
            return self.model.encode(texts, "query", batch_size, wta_k, runner=self._run)
