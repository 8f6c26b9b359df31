"""Query encoders: what a Searcher encodes queries with, and the one place that picks one.

Every query encoder has `config` (the model's EncoderConfig), `digest()` (the model's: indexes built by the model
accept its queries) and `encode(texts, "query")` -> SparseEncoding. Documents are always encoded by the full model.

Kinds (`open_query_encoder`):
- "full": the UHDEncoder itself (encoder/model.py);
- "onnx": the same, its backbone run by ONNX Runtime (encoder/onnx_backbone.py; ~2x faster on a CPU);
- "table": inference-free lookup of MODEL/query_lookup.npz (table.py; with neighbour rows and the context vote
  of vote.py when `uhdsearch lookup` built it so);
- "student": a distilled query student (student.py), in PyTorch or, with onnx=True, in ONNX Runtime.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol, runtime_checkable

from uhdsearch.errors import UsageError
from uhdsearch.sparse import SparseEncoding

KINDS = ("full", "onnx", "table", "student")


@runtime_checkable
class QueryEncoder(Protocol):
    """What a Searcher needs of its encoder."""

    @property
    def config(self): ...

    def digest(self) -> str: ...

    def encode(self, texts, kind: str = "query") -> SparseEncoding: ...


def open_query_encoder(model_dir: str | os.PathLike, kind: str = "full", *, model=None,
                       student: str | os.PathLike | None = None, onnx: bool = False, threads: int | None = None,
                       wta_k: int | None = None) -> QueryEncoder:
    """The query encoder of the model saved in `model_dir`.

    Args:
        kind: one of KINDS.
        model: the model of `model_dir` already loaded (the server encodes documents with it); None: loaded here.
        student: the query student's .safetensors file (kind "student").
        onnx: run the student in ONNX Runtime (kind "student"; kind "onnx" is the full model's backbone).
        threads: ONNX Runtime's threads (kinds "onnx" and "student" with onnx).
        wta_k: winners per token at inference (kinds "full" and "onnx"; a table or student is fixed).

    Raises:
        UsageError: an unknown kind, or an option the kind does not take.
        FileNotFoundError: no table (kind "table") or no student file.

    Examples:
        >>> open_query_encoder("models/uhd", kind="vote")
        Traceback (most recent call last):
        uhdsearch.errors.UsageError: query encoder kind='vote'; choose full, onnx, table or student (a table built \
with a vote is a 'table')
    """
    if kind not in KINDS:
        raise UsageError(f"query encoder kind={kind!r}; choose full, onnx, table or student (a table built with a "
                         "vote is a 'table')")
    if (student is not None) != (kind == "student"):
        raise UsageError("give a student file with kind='student', and only then")
    if wta_k is not None and kind in ("table", "student"):
        raise UsageError(f"wta_k does not apply to a {kind}: its winners were fixed when it was built")
    if onnx and kind != "student":
        raise UsageError("onnx=True runs a student in ONNX Runtime; for the full model use kind='onnx'")
    if model is None:
        from uhdsearch.encoder.model import UHDEncoder

        model = UHDEncoder.from_pretrained(model_dir, **({"wta_k": wta_k} if wta_k is not None else {}))
    if kind == "full":
        return model
    if kind == "onnx":
        model.use_onnx_runtime(threads=threads)
        return model
    if kind == "table":
        from uhdsearch.encoder.query.table import LookupEncoder

        return LookupEncoder.load(Path(model_dir), model)
    from uhdsearch.encoder.query.student import QueryStudent, StudentQueryEncoder

    return StudentQueryEncoder(model, QueryStudent.load(student, model.backbone), onnx=onnx, threads=threads)
