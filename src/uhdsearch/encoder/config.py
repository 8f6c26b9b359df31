"""EncoderConfig: the UHD encoder's hyperparameters, validated, with JSON round trip."""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

from uhdsearch._version import __version__
from uhdsearch.errors import ModelFormatError, UsageError

FORMAT = "uhd-encoder"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class EncoderConfig:
    """Hyperparameters of a UHD encoder (paper §3.2-3.5, A.1).

    Layers count like transformers' `hidden_states`: 0 is the embedding output, 1..L the
    transformer layers; negative numbers count from the end (-1 = last layer).

    Examples:
        >>> EncoderConfig(dim=8192, wta_k=40, query_k=None).bucket_layers
        (-1,)
        >>> EncoderConfig(dim=8192, wta_k=9000)
        Traceback (most recent call last):
        ...
        uhdsearch.errors.UsageError: wta_k=9000 must satisfy 0 < wta_k <= dim (8192)
    """

    dim: int = 81_920  # n, A.1: chosen from {8192, 24576, 49152, 81920}
    wta_k: int = 80  # winners per token, A.1
    query_k: int | None = 100  # Table 4: best MS MARCO query truncation; None keeps all
    bucket_layers: tuple[int, ...] = (-1,)  # §3.5; the paper's multi-bucket model uses (2, 4, ..., 12)
    bucket_weights: tuple[float, ...] | None = None  # Eq. 7 weights; None = 1.0 each
    weight_sparsity: float = 0.7  # A.1: share of each WTA unit's input weights fixed at zero
    query_max_length: int = 32  # A.1
    document_max_length: int = 180  # A.1
    seed: int = 0  # WTA initialisation and sparsity mask
    # The h x dim projection dominates CPU encoding; bfloat16 runs it ~4x faster where the CPU has
    # AMX/AVX512-BF16. Winners are chosen and valued in this precision; scoring stays float32.
    wta_dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        _check_types(self)
        object.__setattr__(self, "bucket_layers", tuple(int(x) for x in self.bucket_layers))
        if self.bucket_weights is not None:
            object.__setattr__(self, "bucket_weights", tuple(float(x) for x in self.bucket_weights))
        if not isinstance(self.dim, int) or self.dim < 1:
            raise UsageError(f"dim={self.dim!r} must be a positive integer")
        if not 0 < self.wta_k <= self.dim:
            raise UsageError(f"wta_k={self.wta_k} must satisfy 0 < wta_k <= dim ({self.dim})")
        if self.query_k is not None and not 0 < self.query_k <= self.dim:
            raise UsageError(f"query_k={self.query_k} must satisfy 0 < query_k <= dim ({self.dim}), or be None")
        if not self.bucket_layers:
            raise UsageError("bucket_layers must name at least one backbone layer")
        if len(set(self.bucket_layers)) != len(self.bucket_layers):
            raise UsageError(f"bucket_layers={list(self.bucket_layers)} has duplicates")
        if self.bucket_weights is not None and len(self.bucket_weights) != len(self.bucket_layers):
            raise UsageError(
                f"bucket_weights has {len(self.bucket_weights)} values but bucket_layers has "
                f"{len(self.bucket_layers)}; give one weight per bucket layer"
            )
        if self.bucket_weights is not None and not all(math.isfinite(w) for w in self.bucket_weights):
            raise UsageError(f"bucket_weights={list(self.bucket_weights)} must be finite numbers (NaN or infinite "
                             "weights give NaN or infinite scores)")
        if not 0.0 <= self.weight_sparsity < 1.0:
            raise UsageError(f"weight_sparsity={self.weight_sparsity} must be in [0, 1)")
        if self.wta_dtype not in ("bfloat16", "float32"):
            raise UsageError(f"wta_dtype={self.wta_dtype!r}; choose 'bfloat16' or 'float32'")
        for name in ("query_max_length", "document_max_length"):
            if getattr(self, name) < 2:
                raise UsageError(f"{name}={getattr(self, name)} must be at least 2 ([CLS] and [SEP])")

    @property
    def n_buckets(self) -> int:
        return len(self.bucket_layers)

    @property
    def weights(self) -> tuple[float, ...]:
        """Bucket weights with the default of 1.0 each filled in."""
        return self.bucket_weights if self.bucket_weights is not None else (1.0,) * self.n_buckets

    def replace(self, **changes: Any) -> EncoderConfig:
        """A copy with some fields changed (e.g. wta_k or query_k at inference, §3.3)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            valid = ", ".join(f.name for f in dataclasses.fields(self))
            raise TypeError(f"unknown EncoderConfig field(s) {sorted(unknown)}; valid: {valid}")
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION, "uhdsearch_version": __version__}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any], source: str = "uhd_config.json") -> EncoderConfig:
        if not isinstance(obj, dict):
            raise ModelFormatError(f"{source}: expected a JSON object, got {type(obj).__name__}")
        if obj.get("format") != FORMAT:
            raise ModelFormatError(f"{source}: format is {obj.get('format')!r}, expected {FORMAT!r}")
        if obj.get("format_version", 0) > FORMAT_VERSION:
            raise ModelFormatError(
                f"{source}: format_version {obj['format_version']} is newer than supported ({FORMAT_VERSION}); "
                "upgrade uhdsearch"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in obj.items() if k in names})
        except (TypeError, ValueError) as exc:
            raise ModelFormatError(f"{source}: invalid settings: {exc}") from exc


def _check_types(config: EncoderConfig) -> None:
    """Name the field whose value has the wrong type (a hand-edited uhd_config.json) before any arithmetic on it."""
    integer = (numbers.Integral,)
    kinds = {"dim": integer, "wta_k": integer, "query_k": integer + (type(None),), "seed": integer,
             "query_max_length": integer, "document_max_length": integer, "weight_sparsity": (numbers.Real,)}
    for name, accepted in kinds.items():
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, accepted):
            raise UsageError(f"{name}={value!r} must be {'a number' if name == 'weight_sparsity' else 'an integer'}"
                             f"{' or null' if name == 'query_k' else ''}")
    for name, item in (("bucket_layers", numbers.Integral), ("bucket_weights", numbers.Real)):
        value = getattr(config, name)
        if value is None and name == "bucket_weights":
            continue
        if not isinstance(value, (str, bytes)) and hasattr(value, "__iter__"):
            value = tuple(value)  # once: an iterator would be used up by the check
            object.__setattr__(config, name, value)
            if all(isinstance(x, item) and not isinstance(x, bool) for x in value):
                continue
        raise UsageError(f"{name}={value!r} must be a list of "
                         f"{'layer numbers' if name == 'bucket_layers' else 'numbers, or null'}")
