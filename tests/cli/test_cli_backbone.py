"""`uhdsearch train --train-backbone-layers N`: the top layers train on cached states and ship with the model."""
from __future__ import annotations

import json

import torch

from tests.cli.cli_support import TRAIN_OPTIONS, call
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.model import UHDEncoder


def test_train_backbone_layers_trains_the_top_layer_only_and_saves_it(tmp_path, scifact_mini_dir, tiny_backbone_dir):
    model_dir = tmp_path / "model"
    code, out, err = call(["train", "--data", str(scifact_mini_dir), "--out", str(model_dir),
                           "--backbone", str(tiny_backbone_dir), *TRAIN_OPTIONS, "--train-backbone-layers", "1",
                           "--learning-rate", "1e-3", "--backbone-learning-rate", "1e-3", "--max-steps", "3",
                           "--eval-every", "0"])
    assert code == 0, err
    assert json.loads(out)["steps"] == 3
    original = Backbone.from_pretrained(tiny_backbone_dir).model.state_dict()
    trained = UHDEncoder.from_pretrained(model_dir).backbone.model.state_dict()
    changed = {name for name in original if not torch.equal(original[name], trained[name])}
    assert changed and all(name.startswith("encoder.layer.1.") for name in changed)
