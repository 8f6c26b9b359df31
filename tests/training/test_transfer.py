"""Recipe(init_head=DIR): a trained model's heads start training on another collection, re-centred there."""
from __future__ import annotations

import pytest
import torch

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.errors import UsageError
from uhdsearch.training.transfer import load_head


def _model(backbone_dir, seed: int, dim: int = 256) -> UHDEncoder:
    return UHDEncoder.new(backbone_dir, EncoderConfig(dim=dim, wta_k=8, query_k=None, seed=seed))


def test_heads_are_copied_then_recentred(tmp_path, tiny_backbone_dir):
    source = _model(tiny_backbone_dir, seed=1)
    with torch.no_grad():
        next(iter(source.buckets.wta.values())).bias.add_(0.5)  # as if training had moved it
    source.save_pretrained(tmp_path / "source")
    target = _model(tiny_backbone_dir, seed=2)
    before = target.digest()
    load_head(target, tmp_path / "source")
    assert target.digest() != before
    for key, value in source.buckets.state_dict().items():
        assert torch.equal(target.buckets.state_dict()[key], value), key
    states = target.token_states(["the mouse genome", "heart failure after surgery in older patients"],
                                 show_progress=False)
    target.center_buckets(states)
    layer = target.layers[0]
    wta, mean = target.buckets.wta[str(layer)], states.layer(layer).float().mean(dim=0)
    assert torch.allclose(wta.bias, -(wta.weight @ mean), atol=1e-5)
    assert torch.equal(wta.weight, source.buckets.wta[str(layer)].weight)  # the learned projection stays


def test_a_head_of_another_shape_is_refused(tmp_path, tiny_backbone_dir):
    _model(tiny_backbone_dir, seed=1, dim=512).save_pretrained(tmp_path / "wide")
    with pytest.raises(UsageError, match="init_head=.*wide.*dim 512.*dim 256"):
        load_head(_model(tiny_backbone_dir, seed=2), tmp_path / "wide")
    with pytest.raises(UsageError, match="no saved UHD model"):
        load_head(_model(tiny_backbone_dir, seed=2), tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="init_head=.*empty.*no saved UHD model"):
        load_head(_model(tiny_backbone_dir, seed=2), tmp_path / "empty")
