"""One tiny model trained by `uhdsearch train` and indexed by `uhdsearch index`, shared by the CLI tests."""
from __future__ import annotations

import json

import pytest

from tests.cli.cli_support import TRAIN_OPTIONS, Trained, call


@pytest.fixture(scope="session")
def trained(tmp_path_factory, scifact_mini_dir, tiny_backbone_dir) -> Trained:
    """`uhdsearch train` then `uhdsearch index` (binary and weighted) on scifact-mini, once per session."""
    root = tmp_path_factory.mktemp("cli")
    model = root / "model"
    code, out, err = call(["train", "--data", str(scifact_mini_dir), "--out", str(model),
                            "--backbone", str(tiny_backbone_dir), *TRAIN_OPTIONS])
    assert code == 0, err
    train_output = json.loads(out)
    outputs = {}
    for variant in ("binary", "weighted"):
        code, out, err = call(["index", "--model", str(model), "--data", str(scifact_mini_dir),
                                "--out", str(root / f"index-{variant}"), "--variant", variant, "--batch-size", "64"])
        assert code == 0, err
        outputs[variant] = json.loads(out)
    return Trained(model, root / "index-binary", root / "index-weighted", train_output,
                   outputs["binary"], outputs["weighted"])
