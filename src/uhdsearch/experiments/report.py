"""What a comparison returns: the result JSON (scores, p-values against BM25, seconds, config) and its table."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from uhdsearch.evaluation.experiment import Comparison
from uhdsearch.experiments.context import SystemContext
from uhdsearch.experiments.registry import BASELINE
from uhdsearch.types import Retriever


@dataclass
class ComparisonReport:
    """What `uhdsearch.experiments.compare` returns: the result JSON, the comparison and the built systems.

    Attributes:
        results: The JSON written to `out_path` (dataset, split, systems -> measures, p_values, seconds, config).
        comparison: Scores, p-values against BM25, per-query values and runs.
        systems: name -> the built retriever.
    """

    results: dict[str, Any]
    comparison: Comparison
    systems: dict[str, Retriever] = field(repr=False)

    def format_table(self) -> str:
        """The significance table plus one line of build / search seconds per system."""
        seconds = self.results["seconds"]
        lines = [self.comparison.format_table(), "", "seconds: build (own work) / search (all test queries)"]
        lines += [f"  {n:24s} {s['build']:9.1f} {s['search']:9.1f}" for n, s in seconds.items()]
        lines += [f"  shared: {k} {v:.1f}" for k, v in self.results["shared_seconds"].items()]
        return "\n".join(lines)


def results_json(ctx: SystemContext, comparison: Comparison, names: list[str], split: str,
                 search_seconds: dict[str, float]) -> dict[str, Any]:
    """The result JSON of one comparison: ``{"dataset", "split", "n_queries", "systems": {name: {measure:
    value}}, "baseline", "p_values", "seconds": {name: {"build", "search"}}, "shared_seconds", "config"}``."""
    data = ctx.data
    if ctx.in_domain:
        train_data = f"{data.name}/train" if ctx.train_data else "ICT pairs"
    else:
        train_data = str(ctx.source_dir)
    return {
        "dataset": data.name,
        "split": split,
        "n_queries": comparison.n_queries,
        "systems": {n: {m: round(v, 4) for m, v in comparison.scores[n].items()} for n in names},
        "baseline": BASELINE,
        "p_values": {n: {m: (None if math.isnan(p) else p) for m, p in by.items()}
                     for n, by in comparison.p_values.items()},
        "seconds": {n: {"build": round(ctx.build_seconds.get(n, 0.0), 2), "search": round(search_seconds[n], 2)}
                    for n in names},
        "shared_seconds": {key: round(v, 2) for key, v in ctx.shared_seconds.items()},
        "config": {
            "train_data": train_data, "in_domain": ctx.in_domain, "fast": ctx.fast,
            "backbone": str(ctx.backbone_dir or "all-MiniLM-L6-v2"), "max_length": ctx.max_length, "k": ctx.k,
            "n_documents": len(ctx.documents), **ctx.notes,
        },
    }
