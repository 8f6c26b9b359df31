"""The backbone's inference pass through ONNX Runtime: same inputs and outputs as Backbone.forward, no WTA.

On a 2-core CPU, eager PyTorch spends most of a short query's backbone pass in per-operator overhead and
unfused small matrix products; ONNX Runtime fuses attention, GELU and LayerNorm and runs the same float32
graph about 2x faster (benchmarks/speed/encoding_speed.py). The graph is exported in memory from the loaded
weights, so nothing is written to disk and it can never disagree with the model it came from.
"""
from __future__ import annotations

import io
import warnings

import numpy as np
import torch
from torch import nn

from uhdsearch._optional import require
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.errors import UsageError


class _HiddenStates(nn.Module):
    """Wraps the Hugging Face model so that the exported graph returns just the wanted layers."""

    def __init__(self, model: nn.Module, layers: list[int]) -> None:
        super().__init__()
        self.model = model
        self.layers = list(layers)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        states = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return tuple(states.hidden_states[layer] for layer in self.layers)


def export_onnx(backbone: Backbone, layers: list[int]) -> bytes:
    """The backbone (inference mode) as an ONNX graph whose outputs are the hidden states of `layers`."""
    require("onnx", "onnx")
    example = backbone.tokenize(["an example query", "a second, somewhat longer example query"], 16)
    wrapper = _HiddenStates(backbone.model, layers)
    wrapper.train(backbone.model.training)  # so that export_module restores the backbone's own mode
    return export_module(wrapper, example, [f"layer_{layer}" for layer in layers])


def export_module(module: nn.Module, example: dict[str, torch.Tensor], output_names: list[str]) -> bytes:
    """`module(input_ids, attention_mask)` (inference mode) as an ONNX graph with dynamic batch and length."""
    require("onnx", "onnx")  # what torch's exporter writes the graph with
    was_training = module.training
    module.eval()  # the exporter restores the module's mode recursively afterwards
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about Python control flow on shapes
            # The TorchScript exporter: ~3 s for MiniLM against ~15 s for the dynamo one, same graph quality.
            torch.onnx.export(
                module, (example["input_ids"], example["attention_mask"]), buffer,
                input_names=["input_ids", "attention_mask"], output_names=output_names,
                dynamic_axes={"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"}},
                opset_version=17, dynamo=False,
            )
    finally:
        module.train(was_training)
    return buffer.getvalue()


def _session(graph: bytes, threads: int | None):
    onnxruntime = require("onnxruntime", "onnx")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # Spinning pool threads would keep both cores busy through the WTA product that follows in torch.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])


def _run(session, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
    feed = {"input_ids": input_ids.numpy().astype(np.int64, copy=False),
            "attention_mask": attention_mask.numpy().astype(np.int64, copy=False)}
    return [torch.from_numpy(out) for out in session.run(None, feed)]


class OnnxModule:
    """Runs `module(input_ids, attention_mask)` (one tensor or a tuple out) with ONNX Runtime; a snapshot of its
    weights at construction."""

    def __init__(self, module: nn.Module, example: dict[str, torch.Tensor], threads: int | None = None) -> None:
        require("onnxruntime", "onnx")  # before the export's seconds
        self.session = _session(export_module(module, example, ["output"]), threads)

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        return _run(self.session, input_ids, attention_mask)


class OnnxBackbone:
    """Runs the exported backbone with ONNX Runtime; a snapshot: later weight changes are not seen."""

    def __init__(self, backbone: Backbone, layers: list[int], threads: int | None = None) -> None:
        require("onnxruntime", "onnx")  # before the export's seconds
        self.layers = list(layers)
        self.session = _session(export_onnx(backbone, self.layers), threads)

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, layers: list[int]) -> list[torch.Tensor]:
        """Token states of `layers` (those given at construction), each (batch, seq, hidden) float32."""
        if list(layers) != self.layers:
            raise UsageError(f"this ONNX graph returns layers {self.layers}, not {list(layers)}")
        return _run(self.session, input_ids, attention_mask)
