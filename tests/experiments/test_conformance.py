"""One conformance test over every registered system (PyTerrier's testing.py is the model), plus a few
hand-built configurations the registry does not hold: Run shape, scores sorted descending, unique doc_ids
within the corpus, at most k results for several k, a smaller k the head of a larger one, empty query list and
empty query text.

The registered systems are built once, in one shared context on scifact-mini (tiny backbone, max_length 64, a
few seconds of UHD training); a newly registered system is covered by being registered.
"""
from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from uhdsearch.baselines.bm25 import BM25Retriever, wordpiece_analyzer
from uhdsearch.baselines.dense import DenseRetriever
from uhdsearch.baselines.hybrid import HybridRetriever
from uhdsearch.baselines.splade import SpladeRetriever
from uhdsearch.experiments import SYSTEMS, SystemContext
from uhdsearch.recipes.recipe import Recipe
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.search.searcher import Searcher
from uhdsearch.types import Query, Retriever

TINY = Recipe(dim=1024, wta_k=8, ict_per_document=1, max_minutes=0.05, eval_every=None,
              document_max_length=64)
KS = (1, 7, 1000)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The flows fit many small matrices: on a busy machine torch's thread pool spins (10-20x the CPU time)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def context(scifact_mini_dir, tiny_backbone_dir):
    return SystemContext.load(scifact_mini_dir, backbone_dir=tiny_backbone_dir, recipe=TINY, max_length=64,
                              show_progress=False)


@pytest.fixture(scope="module")
def hand_built(tiny_backbone_dir, tiny_encoder_session, mini_data, mini_encoding):
    """Configurations outside the registry: UHD over two bucket layers, SPLADE and fusions on 80 documents with
    a fusion depth of 5 (fewer candidates than k)."""
    ids = list(mini_data.corpus)
    digest = tiny_encoder_session.digest()
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_dir)
    small = dict(list(mini_data.corpus.items())[:80])  # SPLADE encodes every document: keep it small
    uni = BM25Retriever.build(small, analyzer=wordpiece_analyzer(tokenizer), show_progress=False)
    bi = BM25Retriever.build(small, analyzer=wordpiece_analyzer(tokenizer, True), show_progress=False)
    splade = SpladeRetriever.build(small, model_dir=tiny_backbone_dir, max_length=64)
    return {
        "bm25": (BM25Retriever.build(mini_data.corpus, show_progress=False), mini_data.corpus),
        "dense": (DenseRetriever.build(mini_data.corpus, backbone=tiny_backbone_dir, max_length=64,
                                       show_progress=False), mini_data.corpus),
        "uhd-binary": (Searcher(tiny_encoder_session, BinaryIndex.from_encoding(mini_encoding, ids, None, digest)),
                       mini_data.corpus),
        "uhd-weighted": (Searcher(tiny_encoder_session,
                                  WeightedIndex.from_encoding(mini_encoding, ids, None, digest), "weighted"),
                         mini_data.corpus),
        "bm25-uni-80": (uni, small),
        "bm25-bi-80": (bi, small),
        "splade-tiny-80": (splade, small),
        "hybrid-depth-5": (HybridRetriever(splade, bi, weight=0.3, depth=5), small),
        "rrf-depth-5": (HybridRetriever(splade, uni, method="rrf", depth=5), small),
    }


def check_conforms(retriever, queries, corpus, k):
    assert isinstance(retriever, Retriever)
    run = retriever.search(queries, k=k)
    assert list(run) == [q.query_id for q in queries]
    for q in queries:
        hits = run[q.query_id]
        assert 0 < len(hits) <= min(k, len(corpus))
        ids = [h.doc_id for h in hits]
        assert len(set(ids)) == len(ids) and set(ids) <= set(corpus)
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
    assert len(retriever.search([], k=k)) == 0
    return run


def check_edges(retriever, queries, corpus):
    """Several k, a smaller k the head of a larger one (the comparison's run cache cuts runs so), empty text.

    A fusion normalizes over max(depth, k) hits of each system, so beyond its depth (100) a deeper run may
    order the head differently; the comparison never cuts a fusion's run, and the heads below depth must agree.
    """
    runs = {k: check_conforms(retriever, queries, corpus, k) for k in KS}
    pairs = list(zip(KS, KS[1:]))
    if isinstance(retriever, HybridRetriever):
        pairs = [(small, large) for small, large in pairs if large <= retriever.depth]
    for small, large in pairs:
        for q in queries:
            assert runs[small].doc_ids(q.query_id) == runs[large].doc_ids(q.query_id)[:small]
    run = retriever.search([Query("empty", ""), Query("blank", "  "), queries[0]], k=10)
    assert list(run) == ["empty", "blank", queries[0].query_id]
    assert run["empty"] == [] and run["blank"] == [] and 0 < len(run[queries[0].query_id]) <= 10


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_every_registered_system_conforms(context, mini_data, name):
    retriever = context.system(name).retriever  # the system itself, not the comparison's run cache
    check_edges(retriever, mini_data.queries[:8], mini_data.corpus)


@pytest.mark.parametrize("name", ["bm25", "dense", "uhd-binary", "uhd-weighted", "bm25-uni-80", "bm25-bi-80",
                                  "splade-tiny-80", "hybrid-depth-5", "rrf-depth-5"])
def test_hand_built_configurations_conform(hand_built, mini_data, name):
    retriever, corpus = hand_built[name]
    check_edges(retriever, mini_data.queries[:8], corpus)


def test_every_system_class_is_a_retriever():
    """One protocol name for whatever searches (issue 34): every system class satisfies uhdsearch.Retriever."""
    import uhdsearch
    from uhdsearch.baselines.dual_encoder import DualEncoder
    from uhdsearch.baselines.multivector import SumOfMaxReranker
    from uhdsearch.experiments import CachedRetriever
    from uhdsearch.types import Run

    classes = [Searcher, BM25Retriever, DenseRetriever, SpladeRetriever, HybridRetriever, DualEncoder,
               SumOfMaxReranker, CachedRetriever]
    assert [c.__name__ for c in classes if not issubclass(c, Retriever)] == []
    assert not issubclass(Run, Retriever) and not issubclass(BinaryIndex, Retriever)  # the check can fail
    assert uhdsearch.Retriever is Retriever
