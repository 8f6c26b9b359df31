"""ME-m (ME-1 equals DE, max over the first m entries) and sum-of-max (hand example, direct oracle, re-ranking)."""
import numpy as np
import pytest
import torch

from uhdsearch.baselines.bm25 import BM25Retriever
from uhdsearch.experiments.builders import build_sum_of_max
from uhdsearch.baselines.dual_encoder import DualEncoderHead, build_dual_encoder
from uhdsearch.baselines.multivector import SumOfMaxReranker, build_multivector, sum_of_max
from uhdsearch.types import Run, ScoredDoc

MAX_LENGTH = 64


@pytest.fixture(scope="module")
def head(backbone):
    head = DualEncoderHead(backbone.hidden_size, 24, "cls", seed=3)
    with torch.no_grad():  # a non-trivial LayerNorm, as after training
        head.norm.weight.uniform_(0.5, 1.5)
        head.norm.bias.uniform_(-0.2, 0.2)
    return head.eval()


@pytest.fixture(scope="module")
def bm25(documents):
    return BM25Retriever.build(documents, show_progress=False)


def test_me_1_equals_de(backbone, documents, states, head, mini_data):
    de = build_dual_encoder(documents, backbone, head, states, MAX_LENGTH)
    me = build_multivector(documents, backbone, head, 1, states, MAX_LENGTH)
    assert np.allclose(me.entries, de.entries, atol=1e-6)
    queries = mini_data.queries[:10]
    a, b = de.search(queries, k=50), me.search(queries, k=50)
    for q in queries:
        assert [h.doc_id for h in a[q.query_id]] == [h.doc_id for h in b[q.query_id]]
        assert [h.score for h in a[q.query_id]] == pytest.approx([h.score for h in b[q.query_id]], abs=1e-6)


def test_me_m_scores_the_best_of_the_first_m_tokens(backbone, documents, states, head, mini_data):
    m = 4
    me = build_multivector(documents, backbone, head, m, states, MAX_LENGTH)
    assert me.entries.shape == (m * len(documents), 24)  # every mini document has >= 4 tokens
    query = mini_data.queries[0]
    q = me.encode_queries([query.text])[0]
    last = states.layer(backbone.n_layers).float()
    expected = {}
    with torch.no_grad():
        for row in range(20):
            first = last[states.offsets[row] : states.offsets[row] + m]
            expected[documents[row].doc_id] = float((head.project(first).numpy() @ q).max())
    got = {h.doc_id: h.score for h in me.search([query], k=len(documents))[query.query_id]}
    for doc_id, score in expected.items():
        assert got[doc_id] == pytest.approx(score, abs=1e-5)


def test_sum_of_max_hand_example():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    d = torch.tensor([[2.0, 0.0], [0.0, 1.0], [-1.0, 3.0], [0.5, 0.5]])
    owner = torch.tensor([0, 0, 1, 2])
    # doc 0: max(2,0)+max(0,1)+max(2,1) = 5; doc 1: -1+3+2 = 4; doc 2: .5+.5+1 = 2; doc 3 has no tokens
    assert sum_of_max(q, d, owner, 4).tolist() == [5.0, 4.0, 2.0, float("-inf")]


def test_rerank_equals_direct_sum_of_max(backbone, documents, states, bm25, mini_data):
    som = SumOfMaxReranker.build(documents, backbone, bm25, states, depth=30, max_length=MAX_LENGTH)
    query = mini_data.queries[1]
    candidates = bm25.search([query], k=30)
    run = som.rerank([query], candidates, k=10)

    def tokens(text):
        batch = backbone.tokenize([text], MAX_LENGTH)
        with torch.no_grad():
            return torch.nn.functional.normalize(backbone.model(**batch).last_hidden_state[0], dim=1)

    q = tokens(query.text)
    by_id = {d.doc_id: d for d in documents}
    direct = {}
    for hit in candidates[query.query_id]:
        d = tokens(by_id[hit.doc_id].full_text)
        direct[hit.doc_id] = float(torch.stack([(d @ q[t]).max() for t in range(q.shape[0])]).sum())
    best = sorted(direct.items(), key=lambda x: -x[1])[:10]
    hits = run[query.query_id]
    assert len(hits) == 10 and {h.doc_id for h in hits} <= set(direct)
    assert [h.score for h in hits] == pytest.approx([s for _, s in best], abs=0.1)  # bf16 token cache
    for h in hits:
        assert h.score == pytest.approx(direct[h.doc_id], abs=0.1)


@pytest.mark.parametrize("k", [1, 7, 1000])
def test_sum_of_max_search_conforms(backbone, documents, states, bm25, mini_data, k):
    som = build_sum_of_max(documents, backbone_dir=backbone, states=states, max_length=MAX_LENGTH, first_stage=bm25,
                           depth=40)
    queries = mini_data.queries[:5]
    run = som.search(queries, k=k)
    first = bm25.search(queries, k=40)
    assert list(run) == [q.query_id for q in queries]
    for q in queries:
        hits = run[q.query_id]
        assert len(hits) == min(k, 40)
        assert {h.doc_id for h in hits} <= set(first.doc_ids(q.query_id))
        assert len({h.doc_id for h in hits}) == len(hits)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(som.search([], k=k)) == 0


def test_rerank_edges(backbone, documents, states, caplog):
    som = SumOfMaxReranker.build(documents[:30], backbone, None, None, max_length=MAX_LENGTH, show_progress=False)
    candidates = Run({"a": [ScoredDoc(documents[0].doc_id, 1.0), ScoredDoc("not-indexed", 0.5)], "b": []})
    run = som.rerank({"a": "cells", "b": "cells", "c": ""}, candidates, k=5)
    assert [h.doc_id for h in run["a"]] == [documents[0].doc_id]
    assert run["b"] == [] and run["c"] == []
    assert "1 candidates are not in this index" in caplog.text
    with pytest.raises(ValueError, match="no first stage"):
        som.search({"a": "cells"}, k=3)
    with pytest.raises(ValueError, match="m=0 must be a positive integer"):
        build_multivector(documents, backbone, DualEncoderHead(backbone.hidden_size), 0, states)


def test_a_given_head_indexes_another_corpus_without_training(backbone, documents, states, head, mini_data):
    from uhdsearch.experiments.builders import build_de, build_me

    de = build_de(documents, backbone_dir=backbone, states=states, max_length=MAX_LENGTH, head=head)
    me = build_me(documents, backbone_dir=backbone, states=states, max_length=MAX_LENGTH, head=head, m=1)
    assert de.embed_query is head and me.embed_query is head
    assert np.allclose(de.entries, me.entries, atol=1e-6)
