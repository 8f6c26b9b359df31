"""benchmarks/configs/ablations.toml gives exactly the variants benchmarks/experiments/ablations.py defined in code before."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.lib.settings import relative
from uhdsearch.recipes.recipe import Recipe


@pytest.fixture(scope="module")
def ablations():
    from benchmarks.experiments import ablations

    return ablations


def test_the_config_file_holds_the_former_in_code_variants(ablations):
    base = Recipe()  # the former BASE, verbatim below with max_train_minutes as it was named then
    former = {
        "untrained-l6": (base, False),
        "trained-l6": (base, True),
        "trained-l6-distill": (replace(base, distill_weight=1.0), True),
        "trained-l6-qrels-only": (replace(base, ict_per_document=0), True),
        "trained-l6-ict-only": (replace(base, use_train_qrels=False), True),
        "trained-l6-lr1e-3": (replace(base, learning_rate=1e-3), True),
        "trained-l6-lr1e-5": (replace(base, learning_rate=1e-5, eval_every=50), True),
        "trained-l6-lr5e-6": (replace(base, learning_rate=5e-6, eval_every=50), True),
        "trained-l6-long": (replace(base, epochs=3.0, learning_rate=3e-4, max_train_minutes=25.0, eval_every=200),
                            True),
        "untrained-l2-4-6": (replace(base, dim=16_384, bucket_layers=(2, 4, 6)), False),
        "trained-l2-4-6": (replace(base, dim=16_384, bucket_layers=(2, 4, 6)), True),
        "untrained-l6-dim8k": (replace(base, dim=8_192), False),
        "untrained-l6-wta40": (replace(base, wta_k=40), False),
        "untrained-l6-dim64k": (replace(base, dim=65_536), False),
        "untrained-l6-dim80k": (replace(base, dim=81_920), False),
        "trained-l6-unfrozen2": (replace(base, train_backbone_layers=2, learning_rate=2e-5, max_train_minutes=10.0,
                                         eval_every=50), True),
    }
    config = ablations.load_config(ablations.CONFIG)
    assert list(config.variants) == list(former)
    assert config.variants == former
    assert config.base == base
    assert config.query_ks == (100, 400, None)
    assert config.measures == ["nDCG@10", "RR@10", "R@100"]


def test_results_name_the_config_from_the_repository_root(ablations):
    assert relative(ablations.CONFIG) == "benchmarks/configs/ablations.toml"
    assert relative(Path("/elsewhere/x.toml")) == "/elsewhere/x.toml"
