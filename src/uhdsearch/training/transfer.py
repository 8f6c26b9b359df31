"""Start a collection's heads from a model trained elsewhere (the BEIR way: learn where labels exist, use the
weights where none do). `Recipe(init_head=DIR)`: the WTA heads of the trained model in DIR replace the random ones
before training; with `center` their biases are then re-centred on this corpus's mean token state (b = -W mean,
WTALayer.center_), so the learned projection stays and only the corpus' shared direction is removed anew."""
from __future__ import annotations

from pathlib import Path

from uhdsearch.errors import UsageError


def load_head(model, source_dir: str | Path) -> None:
    """Copy the WTA heads (weights, biases, masks) of the model saved in `source_dir` into `model`.

    Raises:
        UsageError: no model there, or its heads have another shape (dim, layers, hidden size).
    """
    from uhdsearch.encoder.model import CONFIG_FILE, UHDEncoder

    path = Path(source_dir)
    if not (path / CONFIG_FILE).is_file():
        raise UsageError(f"init_head={str(source_dir)!r}: no saved UHD model there (no {CONFIG_FILE})")
    source = UHDEncoder.from_pretrained(path)
    mine, theirs = model.buckets.state_dict(), source.buckets.state_dict()
    shapes = {k: tuple(v.shape) for k, v in mine.items()}
    if shapes != {k: tuple(v.shape) for k, v in theirs.items()}:
        raise UsageError(f"init_head={str(source_dir)!r}: its heads (layers {list(source.layers)}, dim "
                         f"{source.config.dim}, hidden {source.backbone.hidden_size}) do not fit this model's "
                         f"(layers {list(model.layers)}, dim {model.config.dim}, hidden {model.backbone.hidden_size})")
    model.buckets.load_state_dict(theirs)
    model._digest = None
