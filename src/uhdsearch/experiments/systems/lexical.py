"""Lexical systems: BM25 (the baseline), BM25 over wordpieces and their bigrams, and SPLADE-tiny."""
from __future__ import annotations

from uhdsearch.baselines.bm25 import BM25Retriever, wordpiece_analyzer
from uhdsearch.experiments.context import SystemContext
from uhdsearch.experiments.registry import register
from uhdsearch.types import Retriever


@register("bm25")
def _bm25(ctx: SystemContext) -> Retriever:
    return BM25Retriever.build(ctx.data.corpus, show_progress=False)


def _wordpiece_bm25(ctx: SystemContext, bigrams: bool) -> Retriever:
    """BM25 over the backbone's wordpieces (and their bigrams): UHD's vocabulary, without learning."""
    name = "bm25-bi" if bigrams else "bm25-uni"
    analyzer = wordpiece_analyzer(ctx.backbone.tokenizer, bigrams=bigrams)
    return BM25Retriever.build(ctx.data.corpus, analyzer=analyzer, name=name, show_progress=False)


register("bm25-uni")(lambda ctx: _wordpiece_bm25(ctx, bigrams=False))
register("bm25-bi")(lambda ctx: _wordpiece_bm25(ctx, bigrams=True))


@register("splade-tiny")
def _splade(ctx: SystemContext) -> Retriever:
    from uhdsearch.baselines.splade import SpladeRetriever

    return SpladeRetriever.build(ctx.data.corpus, max_length=ctx.max_length, show_progress=ctx.show_progress)
