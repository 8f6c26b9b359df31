"""Figure 4's sweeps: one projection per token gives, at every wta_k, what the encoder itself gives at that wta_k;
the untrained head of a collection is built once, centred, with indexes of its digest."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def test_one_projection_gives_every_wta_k(tiny_encoder_session, mini_data) -> None:
    import torch

    from uhdsearch.studies.uhd_sweeps import _encode

    model = tiny_encoder_session
    texts = [d.full_text for d in list(mini_data.corpus.values())[:12]]
    states = model.token_states(texts, "document", show_progress=False)
    layer = model.layers[0]
    dtype = torch.bfloat16 if model.config.wta_dtype == "bfloat16" else torch.float32
    swept = _encode(model.buckets.wta[str(layer)], states, layer, [2, 5, 9], dtype, tokens_per_batch=300, desc="t")
    for k in (2, 5, 9):
        own = model.encode_states(states, "document", wta_k=k, show_progress=False).buckets[0]
        assert swept[k].shape == own.shape
        np.testing.assert_allclose(swept[k].toarray(), own.toarray(), atol=1e-6)
    assert swept[2].nnz < swept[5].nnz < swept[9].nnz  # more winners per token, more active dims


def test_documents_start_with_the_relevant_ones(mini_data) -> None:
    from uhdsearch.studies.uhd_sweeps import _documents

    relevant = {d for rel in mini_data.qrels.values() for d, g in rel.items() if g > 0 and d in mini_data.corpus}
    picked = _documents(mini_data, len(relevant) + 5, seed=0)
    assert set(picked[: len(relevant)]) == relevant and len(set(picked)) == len(relevant) + 5
    assert picked == _documents(mini_data, len(relevant) + 5, seed=0) != _documents(mini_data, len(relevant) + 5, 1)


@pytest.mark.slow
def test_untrained_head_is_built_once_with_its_indexes(scifact_mini_dir: Path, tmp_path: Path) -> None:
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.index.inverted import WeightedIndex
    from uhdsearch.studies.untrained import untrained_dir

    built = untrained_dir(scifact_mini_dir, tmp_path, "splade-tiny", dim=1024)
    assert built == tmp_path / "untrained" / "splade-tiny-scifact-mini-dim1024"
    model = UHDEncoder.from_pretrained(built / "model")
    assert model.config.dim == 1024 and model.backbone.hidden_size == 128
    assert float(model.buckets.wta[str(model.layers[0])].bias.detach().abs().sum()) > 0  # centred, not zero biases
    index = WeightedIndex.load(built / "index-weighted")
    assert index.encoder_digest == model.digest() and index.n_documents == 400
    stamp = (built / "model").stat().st_mtime_ns
    assert untrained_dir(scifact_mini_dir, tmp_path, "splade-tiny", dim=1024) == built
    assert (built / "model").stat().st_mtime_ns == stamp
