"""Named recipes, the one place training settings are chosen: the CLI's --preset, the quickstart, the benchmarks.

>>> sorted(PRESETS)
['compact', 'fast', 'paper', 'quickstart']
>>> (PRESETS["paper"].dim, PRESETS["quickstart"].dim, PRESETS["compact"].dim, PRESETS["fast"].dim)
(81920, 32768, 16384, 8192)
>>> preset("fast", wta_k=20).encoder.wta_k
20
"""
from __future__ import annotations

import dataclasses
from typing import Any

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.errors import UsageError
from uhdsearch.recipes.recipe import Recipe
from uhdsearch.training.trainer import TrainingArgs

# The quickstart (README "The default recipe"): Recipe's defaults, where each choice is explained.
QUICKSTART = Recipe()

# A smoke run in under 3 minutes (`uhdsearch quickstart --fast`, which also subsamples the corpus).
FAST = dict(
    dim=8_192,  # a quarter of the quickstart's head: encoding and training 4x cheaper
    ict_per_document=1,
    max_minutes=1.0,
    eval_every=None,  # no dev split: all train queries make pairs, no evaluation pauses
)

# The quickstart with a head half the size, for CPUs without bfloat16 hardware, where the head's products are most
# of the main job (issue 33). On SciFact dev (benchmarks/experiments/cheaper_recipe.py) it keeps 0.8629 against the
# quickstart's 0.8665. Not the default: its one test run scored UHD-binary 0.7096 against 0.7233 on the same CPU
# (docs/results/training.md), a gap that the 80 dev queries could not show.
COMPACT = dict(
    dim=16_384,  # the head's products (training, dev checks, index) cost half
    eval_every=100,  # half the dev checks' cost, for 0.0006 on dev (0.8629 against 0.8635 checking every 50)
)

# Jung et al. (UHD-BERT) A.1 as far as this package can follow it; ICT, centring and early stopping are ours.
PAPER = Recipe(
    encoder=EncoderConfig(),  # EncoderConfig's defaults are A.1's: n=81,920, k=80, 32/180 tokens, query_k 100
    training=TrainingArgs(
        learning_rate=5e-6,  # A.1
        train_backbone_layers=-1,  # the whole BERT trains with the WTA heads (§3.4)
        epochs=1.0,  # A.1: 1.0 on TREC CAR (0.25 of MS MARCO's triples)
        # batch 32, weight decay 0.01 and linear warm-up then decay are TrainingArgs' defaults (A.1)
        eval_every=None,  # no early stopping in the paper
        max_minutes=None,
    ),
    ict_per_document=0,  # qrels pairs only, in-batch negatives (A.1 ignores the triples' negatives)
    center=False,  # WTA biases as initialised
)

PRESETS: dict[str, Recipe] = {"quickstart": QUICKSTART, "compact": Recipe(**COMPACT), "fast": Recipe(**FAST),
                              "paper": PAPER}


def preset(name: str, **overrides: Any) -> Recipe:
    """The preset `name` with some settings changed (any Recipe, EncoderConfig or TrainingArgs field).

    Raises:
        ValueError: an unknown preset name.
    """
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides) if overrides else PRESETS[name]
