"""Registering a system of the baselines' common signature (`uhdsearch.experiments.builders`): one call.

`register_family` wraps a builder(corpus, queries_train, qrels_train, backbone, states, **options) into a
registry builder that feeds it the context's shared backbone and states and, out of domain, the source
collection: fits on its corpus (``fits_on_source``), trains the head on it (``trains_on_source``), and only
indexes the evaluated corpus with what was learned. What each system learned from goes to
``config["dense_family"]`` of the result JSON.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from uhdsearch.experiments.context import SystemContext
from uhdsearch.experiments.registry import register
from uhdsearch.types import Retriever


def register_family(name: str, builder: Callable[..., Any], *, fits_on_source: bool = False,
                    trains_on_source: bool = False, first_stage: str | None = None, **fixed: Any) -> None:
    """Register `builder` with `fixed` options under `name`.

    Args:
        name: The system's name.
        builder: A common-signature builder of `uhdsearch.experiments.builders`.
        fits_on_source: Pass the source corpus's states as ``fit_states`` (whitening, flows, WTA centring).
        trains_on_source: A trained head (``.embed_query``): out of domain it is trained on the source
            collection and passed as ``head`` to index the evaluated corpus.
        first_stage: A registered system passed as ``first_stage`` (the re-rankers' candidates).
        fixed: Options fixed for this system (e.g. ``dim=32``).
    """
    standalone = partial(builder, **fixed)
    register(name, fits_on_source=fits_on_source, trains_on_source=trains_on_source,
             standalone=standalone)(partial(_build, name, standalone, fits_on_source, trains_on_source, first_stage))


def _build(name: str, builder: Callable[..., Any], fits_on_source: bool, trains_on_source: bool,
           first_stage: str | None, ctx: SystemContext) -> Retriever:
    common = {"max_length": ctx.max_length, "show_progress": ctx.show_progress}
    options: dict[str, Any] = {"first_stage": ctx.system(first_stage)} if first_stage else {}
    source = ctx.source_description()
    notes = ctx.notes.setdefault("dense_family", {})
    if fits_on_source:
        options["fit_states"] = ctx.source_states()
        notes[name] = {"fit_on": source}
    train = ctx.train_data
    if trains_on_source:
        labelled = f"{ctx.source_name}/train qrels + " if train else ""
        notes[name] = {"trained_on": f"{labelled}ICT pairs of {source}"}
        if not ctx.in_domain:  # train the head on the source, then only index the target with it
            trained = builder(ctx.train_documents, train.queries if train else None,
                              train.qrels if train else None, ctx.backbone, ctx.source_states(), **common)
            options["head"] = trained.embed_query
    if not ctx.in_domain:
        train = None
    return builder(ctx.data.corpus, train.queries if train else None, train.qrels if train else None,
                   ctx.backbone, ctx.document_states(), **common, **options)
