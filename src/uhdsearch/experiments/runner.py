"""The one comparison: build or train every chosen system on a BEIR collection, evaluate, test against BM25.

`compare` here is `uhdsearch compare`'s library call; it builds the systems by name (the registry) and hands
their runs to `uhdsearch.compare` (evaluation/experiment.py), which scores and tests systems already in hand.
"""
from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from uhdsearch.evaluation import experiment as evaluation
from uhdsearch.evaluation.metrics import DEFAULT_MEASURES
from uhdsearch.experiments.context import SystemContext
from uhdsearch.experiments.registry import BASELINE, resolve_systems
from uhdsearch.experiments.report import ComparisonReport, results_json
from uhdsearch.io import write_json
from uhdsearch.search.options import SearchOptions
from uhdsearch.types import Retriever, Run, check_k

logger = logging.getLogger(__name__)


def compare(
    data_dir: str | os.PathLike | None = None,
    systems: str | Sequence[str] | None = None,
    train_data_dir: str | os.PathLike | None = None,
    split: str = "test",
    fast: bool = False,
    backbone: str | os.PathLike | None = None,
    recipe: Any = None,
    uhd_model: str | os.PathLike | None = None,
    max_length: int = 256,
    k: int = 1000,
    measures: Sequence[str] = DEFAULT_MEASURES,
    out_path: str | os.PathLike | None = None,
    overwrite: bool = False,
    show_progress: bool = True,
    search_options: Any = None,
) -> ComparisonReport:
    """Build or train each registered system on one collection, search its `split`, compare with BM25, write JSON.

    The library call of `uhdsearch compare`. To compare systems you already hold (Runs or any `Retriever`)
    on your own queries and qrels, call `uhdsearch.compare` (this function does, after building them).

    Args:
        data_dir: BEIR-layout collection (default: the bundled SciFact).
        systems: Registered names (comma-separated or a list); None or "all" for every one. BM25, the
            baseline of the paired t-tests, is always included.
        train_data_dir: Out-of-domain training (Jung et al. Table 3): UHD and the DE/ME heads train on this
            collection's corpus and train split, and whitening, flows and WTA centering are fit on its whole
            corpus; the evaluated collection is only indexed and searched. ``config["dense_family"]`` records
            what each dense-family system was trained or fit on. Default: the evaluated collection's own train
            split when it has one, else ICT pairs of its corpus.
        split: The qrels split to evaluate on.
        fast: The quickstart's fast UHD recipe (small head, one minute of training).
        backbone: Local backbone directory (default: the bundled MiniLM); also the wordpiece tokenizer of
            BM25-uni/bi.
        recipe: A UHD training `Recipe` (see `uhdsearch.experiments.systems.uhd`; overrides `fast`).
        uhd_model: A trained UHD model directory to evaluate instead of training one (overrides `recipe`).
        max_length: Document token limit of the neural systems.
        k: Result depth per query.
        measures: ir_measures names.
        out_path: Where to write the results JSON (e.g. ``benchmarks/results/baselines_scifact.json``); None: nowhere.
        overwrite: Replace an existing `out_path`.
        show_progress: tqdm bars on stderr.
        search_options: The SearchOptions (or a mapping of option strings, as `SearchOptions.parse` takes) the
            "uhd" system searches with; None: SearchOptions.default(). The presets keep their own: "uhd-binary"
            and "uhd-weighted" are SearchOptions.paper(), "uhd-binary-norm" SearchOptions.default().

    Returns:
        A ComparisonReport; ``results`` is ``{"dataset", "split", "systems": {name: {measure: value}},
        "baseline", "p_values", "seconds": {name: {"build", "search"}}, "shared_seconds", "config"}``.

    Raises:
        ValueError: an unknown system name or k <= 0.
        FileExistsError: `out_path` exists and not `overwrite`.
        FileNotFoundError: a missing collection or split.

    Examples:
        >>> from uhdsearch.experiments import compare
        >>> report = compare(systems="bm25", k=10, measures=["nDCG@10"], show_progress=False)  # bundled SciFact
        >>> report.results["n_queries"], report.results["systems"]
        (300, {'bm25': {'nDCG@10': 0.6569}})
    """
    names = resolve_systems(systems)
    check_k(k)
    if search_options is not None and not isinstance(search_options, SearchOptions):
        search_options = SearchOptions.parse(search_options)
    if out_path is not None and Path(out_path).exists() and not overwrite:
        raise FileExistsError(f"{out_path} already exists; pass overwrite=True (CLI: --overwrite) to replace it")
    ctx = SystemContext.load(data_dir, train_data_dir, split, backbone_dir=backbone, fast=fast, recipe=recipe,
                             uhd_model_dir=uhd_model, max_length=max_length, k=k, show_progress=show_progress,
                             search_options=search_options)
    runs: dict[str, Run] = {}
    search_seconds: dict[str, float] = {}
    built: dict[str, Retriever] = {}
    for name in names:
        built[name] = ctx.system(name)
        start = time.perf_counter()
        runs[name] = built[name].search(ctx.data.queries, k)
        search_seconds[name] = time.perf_counter() - start
        logger.info("%s: built in %.1f s, searched in %.1f s", name, ctx.build_seconds[name], search_seconds[name])
    comparison = evaluation.compare(runs, ctx.data.queries, ctx.data.qrels, measures, baseline=BASELINE, k=k)
    results = results_json(ctx, comparison, names, split, search_seconds)
    if out_path is not None:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        write_json(out_path, results)
    return ComparisonReport(results, comparison, built)


def run_comparison(*args: Any, **kwargs: Any) -> ComparisonReport:
    """Deprecated name of `compare` (same arguments, same result); removed in the next release.

    Issue 34 gave running a comparison one name, `compare`, as the CLI command already had.

    Warns:
        DeprecationWarning: on every call, naming `uhdsearch.experiments.compare`.
    """
    warnings.warn("uhdsearch.experiments.run_comparison is deprecated; call uhdsearch.experiments.compare "
                  "(the same arguments)", DeprecationWarning, stacklevel=2)
    return compare(*args, **kwargs)
