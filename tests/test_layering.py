"""Import layering (STYLE §1, §6): index and evaluation never import torch; the CLI imports it only inside commands.

Each check runs in a fresh interpreter so that modules other tests imported do not hide an import.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

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
    "uhdsearch.topk",
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


# --- The import graph of the package, read from the source (every import, lazy ones inside functions too) ---

SRC = Path(__file__).resolve().parents[1] / "src" / "uhdsearch"

# Each module's layer; a module may import only modules of its own layer or below (docs/architecture.md).
# training/ has two tiers: pairs, losses and the loop sit below baselines (DE/ME train on its pairs); the recipe,
# its presets and teachers sit above them (baselines teach and mine negatives).
LAYERS: list[tuple[int, tuple[str, ...]]] = [
    (0, ("uhdsearch", "uhdsearch._version", "uhdsearch._optional", "uhdsearch.errors", "uhdsearch.io",
         "uhdsearch.types", "uhdsearch.topk", "uhdsearch.sparse")),
    (1, ("uhdsearch.evaluation", "uhdsearch.encoder", "uhdsearch.index")),
    (2, ("uhdsearch.search",)),
    (3, ("uhdsearch.training.data", "uhdsearch.training.losses", "uhdsearch.training.negatives",
         "uhdsearch.training.binary", "uhdsearch.training.trainer", "uhdsearch.training")),
    (4, ("uhdsearch.baselines",)),
    (5, ("uhdsearch.training.recipe", "uhdsearch.training.presets", "uhdsearch.training.teachers",
         "uhdsearch.training.mining", "uhdsearch.training.buckets", "uhdsearch.quickstart")),
    (6, ("uhdsearch.experiments", "uhdsearch.studies", "uhdsearch.scale")),
    (6, ("uhdsearch.serving",)),
    (7, ("uhdsearch.cli",)),
]
# Pairs within one layer that must not meet: the index never sees the encoder, evaluation sees only the base.
FORBIDDEN = [("uhdsearch.index", "uhdsearch.encoder"), ("uhdsearch.encoder", "uhdsearch.index"),
             ("uhdsearch.evaluation", "uhdsearch.encoder"), ("uhdsearch.evaluation", "uhdsearch.index")]


# Modules moved in issue 34 keep their old path for one release: an alias that warns and hands over the new module.
# An alias may point up a layer (baselines -> experiments); it holds nothing else, which the test below checks.
DEPRECATED_ALIASES = {
    "uhdsearch.baselines.dense_systems": "uhdsearch.experiments.builders",
    "uhdsearch.baselines.isotropy": "uhdsearch.studies.isotropy",
}


def test_deprecated_aliases_hold_nothing_but_the_alias() -> None:
    for alias, target in DEPRECATED_ALIASES.items():
        path = SRC.parent / (alias.replace(".", "/") + ".py")
        text = path.read_text(encoding="utf-8")
        imports = {line for line in text.splitlines() if line.startswith(("import ", "from "))}
        package, name = target.rsplit(".", 1)
        assert imports == {"import sys", "import warnings", f"from {package} import {name} as _moved"}, alias
        assert "DeprecationWarning" in text and "sys.modules[__name__] = _moved" in text
    code = textwrap.dedent(
        f"""
        import importlib, json, warnings
        out = {{}}
        for alias, target in {DEPRECATED_ALIASES!r}.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                module = importlib.import_module(alias)
            out[alias] = [module is importlib.import_module(target),
                          [str(w.message) for w in caught if w.category is DeprecationWarning]]
        print(json.dumps(out))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for alias, (same, messages) in json.loads(done.stdout.strip().splitlines()[-1]).items():
        assert same and any(DEPRECATED_ALIASES[alias] in m for m in messages), (alias, messages)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    import ast

    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        targets = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and getattr(block.test, "id", getattr(block.test, "attr", None)) == "TYPE_CHECKING"
                       for n in ast.walk(block)}  # annotations only: never imported at run time
        for node in (n for n in ast.walk(tree) if id(n) not in typing_only):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("uhdsearch"):
                targets.add(node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("uhdsearch")}
        graph[_module_name(path)] = targets - {_module_name(path)}
    for alias in DEPRECATED_ALIASES:  # checked by test_deprecated_aliases_hold_nothing_but_the_alias
        graph.pop(alias, None)
    return graph


def _layer(module: str) -> int:
    best = max((prefix for _, prefixes in LAYERS for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), key=len)
    return next(layer for layer, prefixes in LAYERS if best in prefixes)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_every_module_has_a_layer_and_imports_nothing_above_it() -> None:
    graph = _import_graph()
    assert len(graph) > 50  # the walk found the package
    upward = sorted(f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
                    for a, targets in graph.items() for b in targets if _layer(b) > _layer(a))
    assert upward == []
    crossed = sorted(f"{a} imports {b}" for a, targets in graph.items() for b in targets
                     for low, high in FORBIDDEN if _within(a, low) and _within(b, high))
    assert crossed == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every back edge of a depth-first walk, as the cycle it closes."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target in graph and target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_no_import_cycle_between_modules() -> None:
    graph = _import_graph()
    # A package's __init__ re-exporting its own modules is how a package shows its API, not a cycle of design.
    graph = {a: {b for b in targets if not _within(b, a)} for a, targets in graph.items()}
    assert _cycles(graph) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]  # the walk can fail


def test_the_layering_checks_can_fail() -> None:
    assert _layer("uhdsearch.index.kernels.heap") == 1 < _layer("uhdsearch.search.searcher") == 2
    assert _layer("uhdsearch.training.recipe") == 5 > _layer("uhdsearch.baselines.dense") == 4
    assert _layer("uhdsearch.training.data") == 3


def test_no_source_file_over_450_lines() -> None:
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450}
    assert long == {}


def test_the_architecture_page_names_every_module() -> None:
    import re

    section = (SRC.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    unnamed = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                     if p.name != "__init__.py" and not re.search(rf"\b{re.escape(p.stem)}\b", section))
    assert unnamed == []
