"""The training library: pairs (`data`), losses, negatives, binary-aware scoring, the loop (`trainer`), dev checks.

It knows no retriever: the recipes that use baselines as teachers and miners sit above `baselines/` in
`uhdsearch.recipes`.
"""
