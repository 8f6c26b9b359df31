"""Import layering (STYLE §1, §6): index and evaluation never import torch; the CLI imports it only inside commands.

Each check runs in a fresh interpreter so that modules other tests imported do not hide an import.
"""
from __future__ import annotations

import ast
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

# One layer per folder (docs/architecture.md). "" is the base: the package's own modules (types, errors, topk,
# sparse, _optional, _version, _moved) with io/, one folder here (errors <- io <- types). A module imports its own
# folder and the folders of lower layers: nothing above, and nothing beside it on its own layer (encoder, index
# and evaluation never see each other). No module is an exception; moved modules keep their old paths through
# uhdsearch/_moved.py, which imports nothing of the package (it maps old names at run time).
LAYERS: list[tuple[str, ...]] = [
    ("",),                               # the base, io/ included
    ("encoder", "index", "evaluation"),  # side by side: the index never sees torch or the encoder
    ("search",),                         # joins encoder and index
    ("training",),                       # the training library: pairs, losses, negatives, the loop
    ("baselines",),                      # retrievers only (DE/ME heads train on training's pairs)
    ("recipes",),                        # recipes, presets, teachers, mining, buckets, quickstart
    ("experiments", "serving"),          # the comparison systems; the HTTP service
    ("studies", "scale"),                # studies reuse experiment builders; scale serves shards
    ("cli",),                            # parse, call one library function, print
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _folder(module: str) -> str:
    """The top-level folder of a uhdsearch module; "" for the base (the package's own modules and io/)."""
    parts = module.split(".")[1:]
    return parts[0] if parts and parts[0] != "io" and (SRC / parts[0] / "__init__.py").exists() else ""


def _layer(module: str) -> int:
    folder = _folder(module)
    return next(i for i, folders in enumerate(LAYERS) if folder in folders)


def _imports(path: Path) -> list[ast.ImportFrom | ast.Import]:
    """Every import statement of a file that runs (those under `if TYPE_CHECKING:` are annotations only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", getattr(block.test, "attr", None)) == "TYPE_CHECKING"
                   for n in ast.walk(block)}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.ImportFrom, ast.Import)) and id(n) not in typing_only]


def _import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        targets = set()
        for node in _imports(path):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("uhdsearch"):
                targets.add(node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("uhdsearch")}
        graph[_module_name(path)] = targets - {_module_name(path)}
    return graph


def test_every_folder_has_one_layer() -> None:
    folders = [folder for layer in LAYERS for folder in layer]
    assert len(folders) == len(set(folders))
    on_disk = {d.name for d in SRC.iterdir() if (d / "__init__.py").exists()}
    assert set(folders) == on_disk - {"io"} | {""}


def test_no_folder_imports_a_folder_above_or_beside_it() -> None:
    graph = _import_graph()
    assert len(graph) > 50  # the walk found the package
    wrong = sorted(f"{a} ({_folder(a) or 'base'}, layer {_layer(a)}) imports {b} ({_folder(b) or 'base'}, "
                   f"layer {_layer(b)})" for a, targets in graph.items() for b in targets
                   if _folder(a) != _folder(b) and _layer(b) >= _layer(a))
    assert wrong == []


def test_no_private_name_crosses_a_folder() -> None:
    """`from uhdsearch.x.y import _helper` only within x: what another folder needs is public API."""
    crossed = []
    for path in SRC.rglob("*.py"):
        module = _module_name(path)
        for node in _imports(path):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("uhdsearch"):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private and _folder(node.module) != _folder(module):
                    crossed.append(f"{module} imports {', '.join(private)} from {node.module}")
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


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_no_import_cycle_between_modules() -> None:
    graph = _import_graph()
    # A package's __init__ re-exporting its own modules is how a package shows its API, not a cycle of design.
    graph = {a: {b for b in targets if not _within(b, a)} for a, targets in graph.items()}
    assert _cycles(graph) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]  # the walk can fail


def test_the_layering_checks_can_fail() -> None:
    assert _folder("uhdsearch.index.kernels.heap") == "index" and _folder("uhdsearch.types") == ""
    assert _layer("uhdsearch.index.kernels.heap") < _layer("uhdsearch.search.searcher")
    assert _layer("uhdsearch.recipes.recipe") > _layer("uhdsearch.baselines.dense") > _layer("uhdsearch.training.data")
    assert _layer("uhdsearch.index.base") == _layer("uhdsearch.encoder.model")  # beside: neither may import the other
    assert _folder("uhdsearch.io.swap") == "" and _layer("uhdsearch.types") < _layer("uhdsearch.evaluation.metrics")


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
