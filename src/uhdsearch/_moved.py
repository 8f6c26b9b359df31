"""Deprecated aliases of the modules that moved (issue 15's re-layout, issue 34's layers), kept for one release.

`import uhdsearch.index.segments` (or `from ... import ...`) still works: it gives a module that forwards every
name to the new one (the same objects, so classes and isinstance agree), with one DeprecationWarning naming the
new path. Installed by `uhdsearch/__init__.py`, so it is in place before any old path can be imported.

The aliases are made here, at import time, and not by files left at the old paths: a file would import its new
module, which may sit on a higher layer than the old folder (baselines -> experiments), and the layering test
reads every import in the source. CHANGELOG.md lists every old path.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED = {
    "uhdsearch.index.dispatch": "uhdsearch.index.kernels.dispatch",
    "uhdsearch.index.segments": "uhdsearch.index.live.segments",
    "uhdsearch.index.commit": "uhdsearch.index.live.commit",
    "uhdsearch.index.deletions": "uhdsearch.index.live.deletions",
    "uhdsearch.index.additions": "uhdsearch.index.live.additions",
    "uhdsearch.index.merges": "uhdsearch.index.live.merges",
    "uhdsearch.index.leftovers": "uhdsearch.index.live.leftovers",
    "uhdsearch.index.segment_search": "uhdsearch.index.live.segment_search",
    "uhdsearch.search.scoring": "uhdsearch.search.oracle",
    "uhdsearch.search.topk": "uhdsearch.topk",
    "uhdsearch.evaluation.runs": "uhdsearch.types",
    "uhdsearch.comparison": "uhdsearch.experiments",
    # issue 34: folders are layers. The recipes sit above baselines (they use them as teachers and miners).
    "uhdsearch.training.recipe": "uhdsearch.recipes.recipe",
    "uhdsearch.training.presets": "uhdsearch.recipes.presets",
    "uhdsearch.training.teachers": "uhdsearch.recipes.teachers",
    "uhdsearch.training.mining": "uhdsearch.recipes.mining",
    "uhdsearch.training.buckets": "uhdsearch.recipes.buckets",
    "uhdsearch.quickstart": "uhdsearch.recipes.quickstart",
    "uhdsearch.baselines.dense_systems": "uhdsearch.experiments.builders",
    "uhdsearch.baselines.isotropy": "uhdsearch.studies.isotropy",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None  # a plain new module, filled below

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} moved to {new}; the old path is deprecated and will be removed in the "
                      "next release", DeprecationWarning, stacklevel=2)
        target = importlib.import_module(new)

        def forward(name: str):
            try:
                return getattr(target, name)
            except AttributeError:
                raise AttributeError(f"module {module.__name__!r} (now {new}) has no attribute {name!r}") from None

        module.__getattr__ = forward
        module.__dir__ = lambda: dir(target)
        module.__all__ = list(getattr(target, "__all__", [n for n in vars(target) if not n.startswith("_")]))
        module.__doc__ = f"Deprecated alias of {new}."


def install() -> None:
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
