"""The studies: name -> `Study` (what it reproduces and how to run it), and what every result JSON records.

A study is ``run(out_dir, cache_dir, options) -> result``; the registry writes ``<out_dir>/result.json`` with the
provenance (command, backbone, model digest, data) that `provenance` gathers, and the study writes its PNGs
next to it. Expensive steps cache under ``cache_dir`` so an interrupted run resumes where it stopped.
"""
from __future__ import annotations

import importlib
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uhdsearch.errors import UsageError
from uhdsearch.io import atomic_write_text

REPORTS_DIR = Path("reports")
CACHE_DIR = Path(".cache") / "studies"
MODULES = ("index_size", "fidelity", "uhd_analyses", "uhd_sweeps", "training")
DEFAULT_COLLECTION = "scifact"  # its results sit in reports/NAME/; any other collection's in reports/NAME/COLLECTION/


@dataclass(frozen=True)
class Study:
    """One registered study.

    Attributes:
        name: The name of ``uhdsearch study NAME`` and of its folder under reports/.
        title: One line for ``--list`` and the report.
        paper: The paper and section it reproduces.
        run: run(out_dir, cache_dir, options) -> the result (JSON-ready dict, figures already written).
        defaults: Its options and their defaults (``--set key=value`` changes them).
    """

    name: str
    title: str
    paper: str
    run: Callable[[Path, Path, dict[str, Any]], dict[str, Any]]
    defaults: dict[str, Any]


STUDIES: dict[str, Study] = {}


def register(study: Study) -> Study:
    if study.name in STUDIES:
        raise UsageError(f"study {study.name!r} is already registered")
    STUDIES[study.name] = study
    return study


def load_studies() -> dict[str, Study]:
    """Every study (their modules register themselves on import)."""
    for module in MODULES:
        importlib.import_module(f"uhdsearch.studies.{module}")
    return STUDIES


def parse_options(study: Study, pairs: list[str]) -> dict[str, Any]:
    """The study's defaults with ``key=value`` pairs applied, each parsed as JSON when it parses (else a string).

    Examples:
        >>> s = Study("x", "", "", lambda *a: {}, {"sizes": [1, 2], "seed": 0})
        >>> parse_options(s, ["seed=3", "sizes=[10, 100]"])
        {'sizes': [10, 100], 'seed': 3}
    """
    options = dict(study.defaults)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in options:
            raise UsageError(f"--set {pair!r}: use key=value with key one of {', '.join(options)}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def run_study(name: str, options: dict[str, Any] | None = None, reports_dir: Path = REPORTS_DIR,
              cache_dir: Path = CACHE_DIR, command: str | None = None) -> dict[str, Any]:
    """Run study `name`; write ``reports_dir/name/result.json`` (with provenance) and its PNGs; return the result.

    A study run on another collection than SciFact (option ``data``) writes to ``reports_dir/name/COLLECTION/``
    and caches under ``cache_dir/name/COLLECTION/``; one on another backbone (option ``backbone``) under
    ``COLLECTION-BACKBONE/``. ``model=untrained`` reads the collection's untrained
    centred head and its indexes (studies/untrained.py), built once into ``cache_dir/untrained/``.
    """
    studies = load_studies()
    if name not in studies:
        raise UsageError(f"unknown study {name!r}; known: {', '.join(studies)}")
    study = studies[name]
    options = {**study.defaults, **(options or {})}
    options = _resolve_untrained(options, Path(cache_dir))
    sub = result_subdir(name, options)
    out_dir, cache = Path(reports_dir) / sub, Path(cache_dir) / sub
    out_dir.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = study.run(out_dir, cache, options)
    result = {"study": name, "title": study.title, "paper": study.paper,
              "command": command or " ".join(sys.argv), "options": options,
              "seconds": round(time.perf_counter() - start, 1), "machine": platform.platform(), **result}
    atomic_write_text(out_dir / "result.json", json.dumps(result, indent=1, default=_jsonable) + "\n")
    return result


def result_subdir(name: str, options: dict[str, Any]) -> Path:
    """Where a study's results go under reports/: NAME for SciFact, NAME/COLLECTION[-BACKBONE] otherwise. A study
    without a ``data`` option (the training study runs several collections itself) always writes to NAME.

    Examples:
        >>> [str(result_subdir("x", o)) for o in ({"data": None}, {"data": "d/cisi"},
        ...                                       {"data": None, "backbone": "splade-tiny"}, {"backbone": "b"})]
        ['x', 'x/cisi', 'x/scifact-splade-tiny', 'x']
    """
    if "data" not in options:
        return Path(name)
    backbone = options.get("backbone")
    variant = collection_of(options) + (f"-{Path(backbone).name}" if backbone else "")
    return Path(name) if variant == DEFAULT_COLLECTION else Path(name) / variant


def collection_of(options: dict[str, Any]) -> str:
    """The collection a study's options name: the last part of ``data`` (SciFact when unset).

    Examples:
        >>> collection_of({"data": "/work/shared/data/cisi/"}), collection_of({"data": None}), collection_of({})
        ('cisi', 'scifact', 'scifact')
    """
    data = options.get("data")
    return Path(data).name if data else DEFAULT_COLLECTION


def _resolve_untrained(options: dict[str, Any], cache_dir: Path) -> dict[str, Any]:
    """``model=untrained``: the collection's untrained head and, for the options naming one, its indexes."""
    from uhdsearch.studies.untrained import UNTRAINED, untrained_dir

    if options.get("model") != UNTRAINED:
        return options
    from uhdsearch.evaluation.datasets import bundled_dataset_dir

    data = Path(options["data"]) if options.get("data") else bundled_dataset_dir(DEFAULT_COLLECTION)
    built = untrained_dir(data, cache_dir)
    resolved = {**options, "model": str(built / "model")}
    for key, index in (("index", "index-weighted"), ("uhd_index", "index-binary")):
        if key in options:
            resolved[key] = str(built / index)
    return resolved


def model_provenance(model, model_dir: str | Path) -> dict[str, Any]:
    """What a result records about a UHD model: its directory, digest, backbone and settings."""
    bb = model.backbone
    return {"model_dir": str(model_dir), "model_digest": model.digest(),
            "backbone": f"the model's own backbone copy in {model_dir} ({bb.n_layers} layers, hidden "
                        f"{bb.hidden_size}, vocabulary {bb.tokenizer.vocab_size})",
            "uhd_config": model.config.to_json()}


def _jsonable(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
