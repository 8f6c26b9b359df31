"""UHD systems: the quickstart recipe's trained head (binary and weighted), and the untrained centred head
over raw or whitened backbone states (the pair that isolates whitening)."""
from __future__ import annotations

import copy
from dataclasses import replace

from uhdsearch.experiments.builders import build_uhd_binary
from uhdsearch.experiments.context import SystemContext
from uhdsearch.experiments.registry import register
from uhdsearch.experiments.systems.family import register_family
from uhdsearch.search.options import SearchOptions
from uhdsearch.recipes.presets import PRESETS
from uhdsearch.recipes.recipe import cached_layers, train_on_collection
from uhdsearch.types import Retriever

__all__ = ["uhd_model"]


def uhd_model(ctx: SystemContext):
    """The recipe's UHD model and its document encoding, trained once for both variants (and the hybrids).

    The recipe is ``ctx.recipe``, else the quickstart's (fast) one with ``ctx.max_length``. Out of domain the
    model trains (and centres) on the source collection, then encodes the evaluated one.
    """

    def make():
        from uhdsearch.encoder.model import UHDEncoder

        if ctx.uhd_model_dir is not None:
            return _saved_model(ctx)
        recipe = ctx.recipe or replace(PRESETS["fast" if ctx.fast else "quickstart"],
                                       document_max_length=ctx.max_length)
        trains_backbone = recipe.training.train_backbone_layers != 0
        # A trained backbone must not leak into the other systems that share ctx.backbone.
        model = UHDEncoder(copy.deepcopy(ctx.backbone) if trains_backbone else ctx.backbone, recipe.encoder)
        # top layers that train read the states at their input (encoder/top_layers.py)
        inputs = cached_layers(model, recipe.training.train_backbone_layers) or ()
        layers = sorted(set(model.layers) | {ctx.backbone.n_layers} | set(inputs))
        train_states, states = ctx.source_states(layers), ctx.document_states(layers)
        result, n_pairs = train_on_collection(model, ctx.train_documents, ctx.train_data, recipe, train_states,
                                              show_progress=ctx.show_progress)
        ctx.notes["uhd"] = {"recipe": recipe.to_json(),
                            "training_pairs": n_pairs, "training_steps": result.steps,
                            "best_dev_step": result.best_step}
        if trains_backbone:  # the cached states came from the backbone before training
            texts = [d.full_text for d in ctx.documents]
            encoded = model.encode_document(texts, show_progress=ctx.show_progress)
        else:
            encoded = model.encode_states(states, "document", show_progress=ctx.show_progress)
        return model, encoded

    return ctx.shared("uhd-model", make)


def _saved_model(ctx: SystemContext):
    """A trained model as saved (its own backbone encodes the corpus): compare what training produced."""
    from uhdsearch.encoder.query import open_query_encoder

    model = open_query_encoder(ctx.uhd_model_dir, "full")  # the full model: it encodes the documents too
    ctx.notes["uhd"] = {"model": str(ctx.uhd_model_dir), "model_digest": model.digest(), "trained_here": False}
    if _same_weights(model.backbone.model, ctx.backbone.model):  # a frozen backbone: reuse the shared pass
        layers = sorted(set(model.layers) | {ctx.backbone.n_layers})
        return model, model.encode_states(ctx.document_states(layers), "document", show_progress=ctx.show_progress)
    texts = [d.full_text for d in ctx.documents]
    return model, model.encode_document(texts, show_progress=ctx.show_progress)


def _same_weights(a, b) -> bool:
    import torch

    first, second = a.state_dict(), b.state_dict()
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def _uhd(ctx: SystemContext, variant: str, options: SearchOptions) -> Retriever:
    from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
    from uhdsearch.search.searcher import Searcher

    model, encoded = uhd_model(ctx)
    klass = BinaryIndex if variant == "binary" else WeightedIndex
    index = klass.from_encoding(encoded, [d.doc_id for d in ctx.documents], None, model.digest())
    return Searcher(model, index, options=options)


def _searched_as_asked(ctx: SystemContext) -> Retriever:
    """"uhd": the model searched with the comparison's own SearchOptions (`compare --search KEY=VALUE`)."""
    options = ctx.search_options or SearchOptions.default()
    ctx.notes["search_options"] = options.to_json()
    return _uhd(ctx, "weighted" if options.scoring == "weighted" else "binary", options)


# Each name is its options' run name: uhd-binary and uhd-weighted score every dim with plain counts (the paper's
# score, the figures in the README), uhd-binary-norm with the Searcher's defaults (`uhdsearch search`).
register("uhd-binary", fits_on_source=True, trains_on_source=True)(
    lambda ctx: _uhd(ctx, "binary", SearchOptions.paper().replace(scoring="binary")))
register("uhd-weighted", fits_on_source=True, trains_on_source=True)(
    lambda ctx: _uhd(ctx, "weighted", SearchOptions.paper().replace(scoring="weighted")))
register("uhd-binary-norm", fits_on_source=True, trains_on_source=True)(
    lambda ctx: _uhd(ctx, "binary", SearchOptions.default().replace(scoring="binary")))
register("uhd", fits_on_source=True, trains_on_source=True)(_searched_as_asked)
# Untrained: the quickstart's dev early stopping keeps this head, so the pair isolates the effect of whitening.
register_family("uhd-binary-untrained", build_uhd_binary, fits_on_source=True)
register_family("uhd-binary+whiten", build_uhd_binary, fits_on_source=True, whiten=True)
