"""Import layering (STYLE §1, §6): index and evaluation never import torch; the CLI imports it only inside commands.

Each check runs in a fresh interpreter so that modules other tests imported do not hide an import.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

INDEX_MODULES = [
    "uhdsearch.index.base",
    "uhdsearch.index.format",
    "uhdsearch.index.codec",
    "uhdsearch.index.inverted",
    "uhdsearch.index.writer",
    "uhdsearch.index.kernels.dispatch",
    "uhdsearch.index.kernels.heap",
    "uhdsearch.index.kernels.ranges",
    "uhdsearch.index.kernels.validation",
    "uhdsearch.index.live.commit",
    "uhdsearch.index.live.lock",
    "uhdsearch.index.live.merges",
    "uhdsearch.index.live.segments",
]

TORCH_FREE = [
    "uhdsearch",
    "uhdsearch.types",
    "uhdsearch.sparse",
    *INDEX_MODULES,
    "uhdsearch.search.topk",
    "uhdsearch.search.oracle",
    "uhdsearch.evaluation.datasets",
    "uhdsearch.evaluation.metrics",
    "uhdsearch.evaluation.experiment",
    "uhdsearch.baselines.bm25",
]

BLOCKED = ("torch", "transformers")

# Installs a finder that refuses torch and transformers (and records who asked), then imports each module.
_PROBE = textwrap.dedent(
    """
    import importlib, json, sys, traceback

    BLOCKED = {blocked!r}
    attempts = []

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                attempts.append(name)
                raise ImportError(f"{{name}} is blocked by the layering test")
            return None

    sys.meta_path.insert(0, Block())
    results = {{}}
    for module in {modules!r}:
        del attempts[:]
        try:
            importlib.import_module(module)
            error = None
        except BaseException:
            error = traceback.format_exc()
        results[module] = {{"error": error, "attempts": list(attempts),
                           "loaded": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)}}
    print(json.dumps(results))
    """
)


def _probe(modules: list[str]) -> dict:
    code = _PROBE.format(blocked=BLOCKED, modules=modules)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def torch_blocked() -> dict:
    """Import results of every TORCH_FREE module in one interpreter where torch and transformers cannot load.

    One interpreter is enough: with the block in place, a module imports only if nothing it pulls in needs torch.
    """
    return _probe(TORCH_FREE)


@pytest.mark.parametrize("module", TORCH_FREE)
def test_imports_without_torch(torch_blocked: dict, module: str) -> None:
    result = torch_blocked[module]
    assert result["error"] is None, result["error"]
    assert result["loaded"] == []
    if not module.startswith("uhdsearch.baselines."):  # third-party libraries may probe for torch themselves
        # a `try: import torch` would pass the block silently; the finder saw whether it was tried
        assert result["attempts"] == []


def test_the_block_works() -> None:
    """The probe itself must be able to fail: a module that needs torch is reported as failing."""
    result = _probe(["uhdsearch.encoder.model"])["uhdsearch.encoder.model"]
    assert result["error"] is not None
    assert "is blocked by the layering test" in result["error"]
    assert result["attempts"][0] in BLOCKED


def test_index_never_imports_the_encoder() -> None:
    code = textwrap.dedent(
        f"""
        import importlib, json, sys
        for module in {INDEX_MODULES!r}:
            importlib.import_module(module)
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("uhdsearch.encoder"))))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_cli_keeps_heavy_imports_inside_commands() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        import uhdsearch.cli.main
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))
        print(json.dumps({"app": hasattr(uhdsearch.cli.main, "app"), "heavy": heavy}))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"app": True, "heavy": []}
