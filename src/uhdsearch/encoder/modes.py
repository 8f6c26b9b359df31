"""Eval mode for a pass over a model that may be training, safe when other threads encode with the same model.

`module.eval()` then `module.train()` around a pass flips a flag that every thread sharing the module reads: a
Searcher in another thread (a service, a dev check) would run its forward pass with dropout on in between and
encode its query differently. Here the switch happens under one lock, which every caller takes to read the mode;
a module already in eval mode (as from_pretrained returns it) is only read, so passes in eval mode run side by side.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

_LOCK = threading.RLock()  # module-level: a lock attribute would not survive copying or pickling the model


@contextmanager
def evaluating(module: nn.Module) -> Iterator[None]:
    """The block runs with `module` in eval mode; a training module is switched back afterwards.

    Examples:
        >>> layer = nn.Dropout(0.5)
        >>> with evaluating(layer):
        ...     layer.training
        False
        >>> layer.training
        True
    """
    with _LOCK:
        if module.training:  # serialised: no other thread may see the module half-switched
            module.eval()
            try:
                yield
            finally:
                module.train()
            return
    yield
