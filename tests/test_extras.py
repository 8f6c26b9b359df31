"""Packaging extras: a core install imports every module; a missing extra fails where it is used, naming the extra."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Top-level module names that only an extra installs (pyproject's optional-dependencies).
EXTRA_MODULES = {"faiss": "dense", "onnxruntime": "onnx", "onnx": "onnx", "pytest": "dev", "hypothesis": "dev",
                 "Stemmer": "dev", "ranx": "dev", "ray": "ray", "pymilvus": "milvus", "milvus_lite": "milvus"}


def _module_level_imports(path: Path) -> set[str]:
    """Top-level names imported outside any function (what `import module` itself runs)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Import):
                names.update(alias.name.split(".")[0] for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names.add(child.module.split(".")[0])
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return names


def test_no_module_imports_an_extra_at_import_time():
    offenders = {str(p.relative_to(ROOT)): sorted(_module_level_imports(p) & set(EXTRA_MODULES))
                 for p in sorted((ROOT / "src" / "uhdsearch").rglob("*.py"))}
    assert {p: names for p, names in offenders.items() if names} == {}


def test_the_import_scan_can_fail(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import faiss\nif True:\n    from onnx import helper\ndef f():\n    import ranx\n")
    assert _module_level_imports(module) == {"faiss", "onnx"}


def test_extras_declare_what_the_scan_guards():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    assert set(extras) >= {"dense", "onnx", "dev", "all"}
    core = " ".join(project["dependencies"]).lower()
    for name in ("faiss", "onnx", "ranx", "matplotlib", "pytest"):
        assert name not in core, name
    assert "torch==2.13.0" in project["dependencies"]
    assert any(d.startswith("faiss-cpu") for d in extras["dense"])
    assert {d.split(">")[0] for d in extras["onnx"]} == {"onnxruntime", "onnx"}
    assert set(EXTRA_MODULES.values()) <= set(extras)


def test_dense_without_faiss_names_the_extra(monkeypatch):
    from uhdsearch.baselines.dense import DenseRetriever

    monkeypatch.setitem(sys.modules, "faiss", None)  # what a missing package looks like to import
    with pytest.raises(ImportError, match=r'faiss is not installed: pip install "uhdsearch\[dense\]"'):
        DenseRetriever(None, ["d1"], np.zeros((1, 4), dtype=np.float32))


def test_onnx_runtime_without_the_extra_names_it(monkeypatch):
    from uhdsearch.encoder.onnx_backbone import OnnxBackbone, export_onnx

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r'onnxruntime is not installed: pip install "uhdsearch\[onnx\]"'):
        OnnxBackbone(None, [1])
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r'onnx is not installed: pip install "uhdsearch\[onnx\]"'):
        export_onnx(None, [1])
