"""Teachers score (query, row) pairs like the retrievers they come from; rankings are computed once and cached."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from uhdsearch.recipes.teachers import (BM25Teacher, CachedTeacher, DenseTeacher, HybridTeacher, RetrieverTeacher,
                                         SumOfMaxTeacher, rank_with_teacher)
from uhdsearch.types import Document, Run, ScoredDoc

DOCS = [Document(f"d{i}", t) for i, t in enumerate(
    ["cells divide", "mitochondria make energy", "the nucleus holds the genome", "energy of cells", "genome"])]


def _dense() -> DenseTeacher:
    docs = np.array([[1, 0], [0, 1], [0.6, 0.8], [0.8, 0.6], [-1, 0]], dtype=np.float32)
    return DenseTeacher({"a": np.array([1, 0], np.float32)}, docs,
                        encode_queries=lambda texts: np.array([[0, 1]] * len(texts), np.float32))


class Counting:
    """Counts the pairs a teacher is asked to score."""

    def __init__(self, teacher):
        self.teacher, self.name, self.pairs = teacher, teacher.name, 0

    def scores(self, queries, doc_rows):
        self.pairs += len(queries) * len(doc_rows)
        return self.teacher.scores(queries, doc_rows)


def test_dense_teacher_by_hand_and_encodes_unknown_queries():
    out = _dense().scores(["a", "b"], [2, 4])
    assert torch.allclose(out, torch.tensor([[0.6, -1.0], [0.8, 0.0]]))


def test_bm25_teacher_equals_the_retriever_scores():
    from uhdsearch.baselines.bm25 import BM25Retriever

    bm25 = BM25Retriever.build(DOCS, show_progress=False)
    run = bm25.search({"q": "energy of cells"}, k=5, show_progress=False)
    listed = {int(h.doc_id[1:]): h.score for h in run["q"]}
    out = BM25Teacher(bm25).scores(["energy of cells"], [0, 1, 2, 3, 4])[0]
    assert out.tolist() == pytest.approx([listed[r] for r in range(5)])
    assert out[3] > out[0] > 0 and out[2] == 0


def test_sum_of_max_teacher_equals_the_reranker(tiny_encoder, mini_data):
    from uhdsearch.baselines.multivector import SumOfMaxReranker

    docs = list(mini_data.corpus.values())[:30]
    reranker = SumOfMaxReranker.build(docs, tiny_encoder.backbone, max_length=64, show_progress=False)
    query = mini_data.queries[0]
    candidates = Run({query.query_id: [ScoredDoc(d.doc_id, 0.0) for d in docs]})
    reranked = reranker.rerank([query], candidates, k=30)
    row = {d.doc_id: i for i, d in enumerate(docs)}
    teacher = SumOfMaxTeacher.from_reranker(reranker)
    out = teacher.scores([query.text], [row[h.doc_id] for h in reranked[query.query_id]])[0]
    assert out.tolist() == pytest.approx([h.score for h in reranked[query.query_id]], rel=1e-4, abs=1e-4)


def test_hybrid_teacher_is_the_scaled_linear_fusion():
    a, b = _dense(), _dense()
    out = HybridTeacher(a, b, weight=0.25, scales=(1.0, 2.0)).scores(["a"], [0, 1])
    assert torch.allclose(out, torch.tensor([[0.25 * 1 + 0.75 * 0.5, 0.0]]))


def test_retriever_teacher_gives_unlisted_documents_the_lowest_listed_score():
    class Fixed:
        name = "fixed"

        def search(self, queries, k):
            return Run({qid: [ScoredDoc("d3", 5.0), ScoredDoc("d1", 2.0)] for qid in queries})

    teacher = RetrieverTeacher(Fixed(), [d.doc_id for d in DOCS], depth=2)
    assert teacher.scores(["x"], [3, 1, 0]).tolist() == [[5.0, 2.0, 2.0]]


def test_cached_teacher_scores_each_pair_once():
    counting = Counting(_dense())
    cached = CachedTeacher(counting)
    first = cached.scores(["a", "b"], [0, 2])
    assert counting.pairs == 4
    again = cached.scores(["b", "a"], [2, 0, 1])  # only (a, 1) and (b, 1) are new
    assert counting.pairs == 4 + 2
    assert torch.equal(again[:, :2], first.flip(0).flip(1))


def test_rank_with_teacher_top_depth_and_npy_cache(tmp_path):
    teacher = _dense()
    ranked = rank_with_teacher(teacher, ["a", "b", "a"], DOCS, depth=3, cache_dir=tmp_path, show_progress=False)
    assert ranked.queries == ["a", "b"]
    assert ranked.ranking("a") == [0, 3, 2] and ranked.ranking("b") == [1, 2, 3]
    assert np.allclose(ranked.scores[0], [1.0, 0.8, 0.6])
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and all(f.startswith("dense-") and f.endswith(".npy") for f in files)

    class Refuses:
        name = "dense"

        def scores(self, queries, doc_rows):
            raise AssertionError("the cache should have answered")

    again = rank_with_teacher(Refuses(), ["b", "a"], DOCS, depth=3, cache_dir=tmp_path, show_progress=False)
    assert again.as_dict() == ranked.as_dict()
    other = rank_with_teacher(teacher, ["a"], DOCS, depth=3, cache_dir=tmp_path, show_progress=False)
    assert other.ranking("a") == [0, 3, 2] and len(list(tmp_path.iterdir())) == 4  # other queries, other file


def test_rank_with_teacher_scores_only_the_candidates_and_seeds_the_cache():
    counting = Counting(_dense())
    ranked = rank_with_teacher(counting, ["a"], DOCS, depth=5, candidates={"a": [4, 2, 1]}, show_progress=False)
    assert ranked.ranking("a") == [2, 1, 4] and counting.pairs == 3
    assert ranked.ranking("unknown") == []
    cached = CachedTeacher(counting)
    cached.remember(ranked)
    assert cached.scores(["a"], [4, 2])[0].tolist() == pytest.approx([-1.0, 0.6])
    assert counting.pairs == 3
