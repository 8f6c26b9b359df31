"""Recipes: how the library's parts are put together to train and ship a UHD model (the layer above baselines).

A recipe composes `training` (pairs, losses, the loop), `encoder`, `index`, `evaluation` and the `baselines`,
which serve as teachers and as miners of negatives; nothing below this layer imports it.

Modules:
- `recipe`: `Recipe` (an EncoderConfig, TrainingArgs and the recipe's own settings) and `train_on_collection`;
- `presets`: `PRESETS` and `preset(name, **overrides)`, the one place the default numbers are chosen;
- `teachers`: teachers from any retriever (dense, sum-of-max, BM25, hybrid) with cached scores and rankings;
- `mining`: teacher-mined positives and negatives, and the model's own (ANCE) negatives while it trains;
- `buckets`: several buckets trained jointly or separately, then combined; bucket weights tuned on dev;
- `quickstart`: the main job (`uhdsearch quickstart`): train, index, and compare against BM25 and dense.

Until issue 34 these lived in `uhdsearch.training` (and `uhdsearch.quickstart`); the old paths are deprecated
aliases for one release (CHANGELOG.md).
"""
