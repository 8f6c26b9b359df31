"""The training study on scifact-mini with the tiny backbone: one row per recipe beside the untrained head, each
scored as deployed, early stopping's step 0 competing, a rerun read from the cache, one changed recipe recomputed
alone, and bad options refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from uhdsearch.errors import UsageError
from uhdsearch.studies.registry import run_study

COMMON = {"dim": 2048, "wta_k": 16, "document_max_length": 64, "batch_size": 8, "eval_every": 2, "max_steps": 4,
          "ict_per_document": 0}
RECIPES = {"infonce binary": {}, "hinge float": {"loss": "hinge", "binary_aware": False, "learning_rate": 1e-4}}


def _options(scifact_mini_dir: Path, backbone: Path, recipes=RECIPES) -> dict:
    return {"collections": [str(scifact_mini_dir)], "recipes": recipes, "common": COMMON, "backbone": str(backbone),
            "query_lengths": {"scifact-mini": 16}}


def _rows(result: dict) -> list[dict]:
    (rows,) = result["tables"].values()
    return rows


def test_rows_cache_and_resume(scifact_mini_dir: Path, tiny_backbone_dir: Path, tmp_path: Path) -> None:
    reports, cache = tmp_path / "reports", tmp_path / "cache"
    result = run_study("training", _options(scifact_mini_dir, tiny_backbone_dir), reports, cache, command="test")
    rows = _rows(result)
    assert [r["recipe"] for r in rows] == ["untrained centred head (step 0)", *RECIPES]
    untrained = rows[0]
    assert untrained["binary_vs_untrained"] == 0.0 and untrained["kept_step"] == 0
    for row in rows[1:]:
        assert row["steps"] == 4 and [s for s, _ in row["evals"]] == [0, 2, 4]
        assert row["dev_kept"] == max(v for _, v in row["evals"])  # the best dev score is the one kept
        assert row["kept_step"] in (0, 2, 4)
        assert row["binary_vs_untrained"] == pytest.approx(row["binary_nDCG@10"] - untrained["binary_nDCG@10"],
                                                           abs=1e-4)
        if row["kept_step"] == 0:  # step 0 kept: the same head as the untrained row, so the same test scores
            assert row["binary_nDCG@10"] == untrained["binary_nDCG@10"]
        assert 0 < row["active_dims_per_document"] <= 2048
    chosen = result["chosen_on_dev"]["scifact-mini"]
    assert chosen["dev_kept"] == max(r["dev_kept"] for r in rows[1:])
    assert (reports / "training" / "training_scifact-mini.png").read_bytes()[:4] == b"\x89PNG"
    assert len(list(cache.glob("training/*.json"))) == 3

    again = run_study("training", _options(scifact_mini_dir, tiny_backbone_dir), reports, cache, command="test")
    assert _rows(again) == rows  # read back from the cache, not trained again

    changed = {**RECIPES, "hinge float": {**RECIPES["hinge float"], "learning_rate": 3e-4}}
    third = run_study("training", _options(scifact_mini_dir, tiny_backbone_dir, changed), reports, cache,
                      command="test")
    assert len(list(cache.glob("training/*.json"))) == 4  # only the changed recipe ran
    assert _rows(third)[:2] == rows[:2]
    saved = json.loads((reports / "training" / "result.json").read_text())
    assert saved["tables"] == third["tables"]


@pytest.mark.parametrize("change,needle", [({"only": ["nope"]}, "unknown recipe label"),
                                           ({"only": {"scifact-mini": ["nope"]}}, "unknown recipe label"),
                                           ({"recipes": {"x": {"no_such_setting": 1}}}, "unknown Recipe setting"),
                                           ({"recipes": [1, 2]}, "JSON object"),
                                           ({"common": {"train_backbone_layers": 1}}, "frozen backbone")])
def test_bad_options_are_refused(change, needle, scifact_mini_dir, tiny_backbone_dir, tmp_path) -> None:
    options = {**_options(scifact_mini_dir, tiny_backbone_dir), **change}
    with pytest.raises(UsageError, match=needle):
        run_study("training", options, tmp_path / "r", tmp_path / "c", command="test")


def test_the_seed_option_reseeds_the_heads_and_the_batches_and_keys_apart() -> None:
    from uhdsearch.studies.training import DEFAULTS, _key, _recipe

    plain, again = _recipe({}, "cisi", dict(DEFAULTS)), _recipe({}, "cisi", {**DEFAULTS, "seed": 3})
    assert (plain.encoder.seed, plain.training.seed) == (0, 0)
    assert (again.encoder.seed, again.training.seed) == (3, 3)
    assert again.encoder.query_max_length == plain.encoder.query_max_length == 64  # nothing else moves
    assert _key(Path("d"), plain, DEFAULTS) != _key(Path("d"), again, {**DEFAULTS, "seed": 3})
