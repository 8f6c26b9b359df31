"""Hybrids of two registered systems (Luan et al.): a linear interpolation tuned on dev queries, and RRF."""
from __future__ import annotations

import logging
from typing import Literal

from uhdsearch.baselines.hybrid import HybridRetriever
from uhdsearch.experiments.context import SystemContext
from uhdsearch.experiments.registry import register
from uhdsearch.types import Retriever

logger = logging.getLogger(__name__)


def hybrid(ctx: SystemContext, first: str, second: str, name: str,
           method: Literal["linear", "rrf"] = "linear") -> Retriever:
    """The fusion of two systems built in `ctx` (their cached runs are reused, not searched again).

    Linear: the weight is tuned on dev queries when the collection has a train split, else 0.5. What was
    chosen goes to ``config["hybrids"][name]`` of the result JSON.
    """
    a, b = ctx.system(first), ctx.system(second)
    dev = ctx.dev()
    if method == "rrf":
        ctx.notes.setdefault("hybrids", {})[name] = {"method": "rrf", "rrf_k": 60}
        return HybridRetriever(a, b, method="rrf", name=name)
    if dev is None:
        logger.warning("%s: no train split to tune on; weight 0.5", name)
        fused = HybridRetriever(a, b, weight=0.5, name=name)
        tuned_on = "none (default 0.5)"
    else:
        fused = HybridRetriever.tune(a, b, dev[0], dev[1], name=name)
        tuned_on = f"{len(dev[0])} train-split queries (nDCG@10)"
    ctx.notes.setdefault("hybrids", {})[name] = {"method": "linear", "weight": fused.weight, "first": first,
                                                 "normalization": fused.normalization, "depth": fused.depth,
                                                 "tuned_on": tuned_on}
    return fused


register("hybrid-uhd-bm25")(lambda ctx: hybrid(ctx, "uhd-binary", "bm25", "hybrid-uhd-bm25"))
register("hybrid-uhdnorm-bm25")(lambda ctx: hybrid(ctx, "uhd-binary-norm", "bm25", "hybrid-uhdnorm-bm25"))
register("hybrid-dense-bm25")(lambda ctx: hybrid(ctx, "dense", "bm25", "hybrid-dense-bm25"))
register("rrf-uhd-bm25")(lambda ctx: hybrid(ctx, "uhd-binary", "bm25", "rrf-uhd-bm25", "rrf"))
