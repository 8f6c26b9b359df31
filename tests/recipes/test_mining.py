"""Mined positives and negatives (recipes/mining.py): teacher-mined positives are the teacher's top m, a mined
negative is never a positive, and ANCE re-mines from the model's own ranking at the configured steps."""
from __future__ import annotations

import numpy as np
import pytest

from uhdsearch.encoder.states import compute_token_states
from uhdsearch.training.data import TrainingPair, ict_pairs
from uhdsearch.recipes.mining import ModelMiner, rank_for_mining, teacher_mined_pairs
from uhdsearch.training.negatives import positives_by_query, teacher_negatives
from uhdsearch.recipes.recipe import Recipe, train_on_collection
from uhdsearch.recipes.teachers import CachedTeacher, DenseTeacher
from uhdsearch.training.trainer import TrainingArgs, train
from uhdsearch.types import Document

# Six passages on a circle: query "q" at angle 0 ranks them 0, 1, 2, 3, 4, 5 (cosines 1, .97, .87, .71, .5, .26).
ANGLES = np.radians([0, 15, 30, 45, 60, 75])
DOCS = [Document(f"d{i}", f"passage {i}") for i in range(6)]


def _teacher() -> CachedTeacher:
    vectors = np.stack([np.cos(ANGLES), np.sin(ANGLES)], axis=1).astype(np.float32)
    queries = {"q": np.array([1, 0], np.float32), "r": np.array([np.cos(1.3), np.sin(1.3)], np.float32)}
    return CachedTeacher(DenseTeacher(queries, vectors))


def test_mined_positives_are_the_teachers_top_m_plus_the_source_and_negatives_never_positives():
    teacher = _teacher()
    # "q" comes from passage 2 (ranked third); "r" (angle 74.5 degrees) ranks 5, 4, 3, ... and comes from 5
    pairs = [TrainingPair("q", 2, (0, 1)), TrainingPair("r", 5, (0, 1)), TrainingPair("judged", 0)]
    rankings = rank_for_mining(teacher, ["q", "r"], DOCS, depth=6).as_dict()
    assert rankings == {"q": [0, 1, 2, 3, 4, 5], "r": [5, 4, 3, 2, 1, 0]}
    assert teacher.memory[("q", 3)] == pytest.approx(np.cos(ANGLES[3]))  # mining scores are kept for distilling
    mined = teacher_mined_pairs(pairs, rankings, top_m=2)
    positives = positives_by_query(mined)
    assert positives == {"q": {0, 1, 2}, "r": {5, 4}, "judged": {0}}  # top 2 plus the source; qrels pairs as given
    assert [p for p in mined if p.doc_row != 2 and p.query == "q"] == [TrainingPair("q", 0), TrainingPair("q", 1)]
    for seed in range(20):
        negatives = teacher_negatives(mined, rankings, depth=6, skip=0, seed=seed)
        for pair, negative in zip(mined, negatives):
            assert negative is None or negative not in positives[pair.query]
    # "q" with skip 2: only ranks 3.. are left (rows 3, 4, 5), and never rows 0-2
    drawn = {n for seed in range(30) for p, n in zip(mined, teacher_negatives(mined, rankings, depth=6, skip=2,
                                                                              seed=seed)) if p.query == "q"}
    assert drawn == {3, 4, 5}


def test_rank_for_mining_with_a_first_stage_remembers_only_the_top():
    teacher, first = _teacher(), _teacher()
    ranked = rank_for_mining(teacher, ["q"], DOCS, depth=2, first_stage=first)
    assert ranked.ranking("q") == [0, 1]
    assert len(teacher.memory) == 2  # the top 2 are remembered, nothing else was scored through the cache


def test_remine_happens_at_step_0_and_every_n_steps_and_replaces_the_negatives(tiny_encoder, mini_data):
    documents = list(mini_data.corpus.values())[:80]
    pairs = ict_pairs(documents, per_document=1)
    calls = []

    def remine(model):
        calls.append(model.training)
        return [(p.doc_row + 1) % len(documents) for p in pairs]

    result = train(tiny_encoder, documents, pairs, TrainingArgs(batch_size=8, max_steps=7, remine_every=3),
                   remine=remine, show_progress=False)
    assert result.steps == 7 and result.remined_at == [0, 3, 6]
    assert calls == [False, False, False]  # the model ranks in eval mode
    with pytest.raises(ValueError, match="remine_every"):
        train(tiny_encoder, documents, pairs, TrainingArgs(batch_size=8, max_steps=2), remine=remine)


def test_model_miner_ranks_by_the_deployed_binary_overlap_and_never_returns_a_positive(tiny_encoder, mini_data):
    documents = list(mini_data.corpus.values())[:60]
    pairs = ict_pairs(documents, per_document=1)
    pairs += [TrainingPair(pairs[0].query, 7), TrainingPair(pairs[0].query, 9)]  # more positives of one query
    queries = sorted({p.query for p in pairs})
    layers = list(tiny_encoder.layers)
    q_states = compute_token_states(tiny_encoder.backbone, queries, layers, 16, show_progress=False)
    d_states = compute_token_states(tiny_encoder.backbone, [d.full_text for d in documents], layers, 64,
                                    show_progress=False)
    miner = ModelMiner(pairs, queries, q_states, d_states, n_documents=40, depth=10, skip=0)
    assert len(miner.rows) == 40
    # the ranking is the bucket-weighted count of shared active dimensions, as BinaryIndex scores it
    enc_q = tiny_encoder.encode_states(q_states, "query", show_progress=False)
    enc_d = tiny_encoder.encode_states(d_states, "document", show_progress=False, rows=miner.rows)
    overlap = sum(((q > 0).astype(np.float32) @ (d > 0).astype(np.float32).T).toarray()
                  for q, d in zip(enc_q.buckets, enc_d.buckets))
    ranked = miner.rankings(tiny_encoder)
    for i, query in enumerate(queries):
        best = overlap[i].max()
        assert np.isin(ranked[query][0], miner.rows[overlap[i] == best])
        assert [overlap[i][list(miner.rows).index(r)] for r in ranked[query]] == sorted(overlap[i], reverse=True)[:10]
    positives = positives_by_query(pairs)
    for _ in range(5):
        negatives = miner(tiny_encoder)
        assert any(n is not None for n in negatives)
        assert all(n is None or (n not in positives[p.query] and n in set(miner.rows)) for p, n in zip(pairs, negatives))


def test_recipe_trains_with_mined_positives_teacher_negatives_and_ance(tiny_encoder, mini_data):
    documents = list(mini_data.corpus.values())
    recipe = Recipe(dim=1024, wta_k=8, document_max_length=64, ict_per_document=1, epochs=1.0, max_steps=4,
                    eval_every=2, dev_share=0.2, judged_depth=5, loss="infonce", binary_aware=True,
                    mined_positives=3, teacher_negative_depth=20, negative_skip=5, remine_every=2,
                    remine_documents=100, remine_depth=15)
    result, n_pairs = train_on_collection(tiny_encoder, documents, None, recipe, show_progress=False)
    n_ict = len([p for p in ict_pairs(documents, per_document=1)])
    assert n_pairs > n_ict * 0.8 * 2  # the source plus two more of the teacher's top 3 per training query
    assert result.remined_at == [0, 2] and result.evals[0][0] == 0
    with pytest.raises(ValueError, match="teacher_negative_depth"):
        Recipe(mined_positives=5, teacher_negative_depth=5)
    with pytest.raises(ValueError, match="remine_depth"):
        Recipe(remine_depth=10, negative_skip=10)
