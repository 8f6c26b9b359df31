"""Fixtures of the dense-family tests (part D): the tiny backbone and its cached states of the mini corpus."""
from __future__ import annotations

import pytest

DENSE_MAX_LENGTH = 64


@pytest.fixture(scope="session")
def dense_backbone(tiny_backbone_dir):
    """The tiny backbone, loaded once; tests must not train it (take their own copy for that)."""
    from uhdsearch.encoder.backbone import Backbone

    return Backbone.from_pretrained(tiny_backbone_dir).eval()


@pytest.fixture(scope="session")
def dense_states(dense_backbone, mini_data):
    """Last-layer token states of the 400 mini documents (max_length 64), computed once."""
    from uhdsearch.encoder.states import compute_token_states

    return compute_token_states(dense_backbone, [d.full_text for d in mini_data.corpus.values()],
                                [dense_backbone.n_layers], DENSE_MAX_LENGTH, show_progress=False)


# Short names the DE/ME tests use.
@pytest.fixture(scope="session")
def backbone(dense_backbone):
    return dense_backbone


@pytest.fixture(scope="session")
def documents(mini_data):
    return list(mini_data.corpus.values())


@pytest.fixture(scope="session")
def states(dense_states):
    return dense_states
