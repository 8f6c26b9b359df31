import dataclasses

import numpy as np
import pytest
import torch

from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.errors import UsageError
from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.recipes.buckets import (PAPER_GRID, bucket_config, bucket_scores, combine, rank, train_jointly,
                                        train_separately, tune_weights, weight_grid)
from uhdsearch.recipes.recipe import Recipe, train_on_collection


@pytest.fixture(scope="module")
def setup(scifact_mini_dir, tiny_encoder_session):
    train_data = load_beir(scifact_mini_dir, "train")
    documents = list(train_data.corpus.values())
    backbone = tiny_encoder_session.backbone
    states = compute(backbone, documents)
    return backbone, documents, train_data, states


def compute(backbone, documents):
    from uhdsearch.encoder.states import compute_token_states

    return compute_token_states(backbone, [d.full_text for d in documents], [1, 2], 64, show_progress=False)


def recipe(**changes):
    base = Recipe(dim=1024, wta_k=8, bucket_layers=(1, 2), document_max_length=64, query_max_length=16,
                  wta_dtype="float32", ict_per_document=0, learning_rate=1e-2, epochs=1.0, max_steps=3,
                  eval_every=None, batch_size=8)
    return dataclasses.replace(base, **changes) if changes else base


def wta(model, layer):
    return model.buckets.wta[str(layer)].weight.detach().clone()


def test_separate_untrained_buckets_combine_into_the_multi_bucket_encoder(setup, mini_data):
    backbone, documents, _, states = setup
    config = recipe().encoder
    singles = [UHDEncoder(backbone, bucket_config(config, i)) for i in range(2)]
    joint = UHDEncoder(backbone, config)
    for m in (*singles, joint):
        m.center_buckets(states)
    combined = combine(singles, (0.5, 1.0))
    assert combined.config == config.replace(bucket_weights=(0.5, 1.0))
    texts = [q.text for q in mini_data.queries[:8]]
    got, expected = combined.encode(texts, "query"), joint.encode(texts, "query")
    for a, b in zip(got.buckets, expected.buckets):
        assert (a != b).nnz == 0 and a.nnz > 0


def test_combine_refuses_what_it_cannot_join(setup, tiny_backbone_dir):
    backbone = setup[0]
    config = recipe().encoder
    one = UHDEncoder(backbone, bucket_config(config, 0))
    with pytest.raises(UsageError, match="one-bucket"):
        combine([UHDEncoder(backbone, config)])
    with pytest.raises(UsageError, match="share one backbone"):
        combine([one, UHDEncoder.new(tiny_backbone_dir, bucket_config(config, 1))])
    with pytest.raises(UsageError, match=r"differ in \['wta_k'\]"):
        combine([one, UHDEncoder(backbone, bucket_config(config.replace(wta_k=4), 1))])


def test_train_separately_trains_each_bucket_alone_as_the_recipe_does(setup):
    backbone, documents, train_data, states = setup
    r = recipe(eval_every=1, dev_share=0.25)
    combined, results = train_separately(backbone, documents, train_data, r, states, show_progress=False)
    assert combined.config.bucket_layers == (1, 2) and len(results) == 2
    for i, (layer, result) in enumerate(zip((1, 2), results)):
        assert result.evals[0][0] == 0  # each bucket's own early stopping: its untrained start competes
        alone = UHDEncoder(backbone, bucket_config(r.encoder, i))
        train_on_collection(alone, documents, train_data, dataclasses.replace(r, encoder=alone.config,
                                                                              query_lengths=()),
                            states=states, show_progress=False)
        assert torch.equal(wta(combined, layer), wta(alone, layer))


def test_joint_training_goes_through_the_bucket_weighted_score(setup):
    backbone, documents, train_data, states = setup
    untrained = UHDEncoder(backbone, recipe().encoder)
    untrained.center_buckets(states)
    # A bucket of weight 0 adds nothing to the binary-aware score, so it gets no gradient (and without weight
    # decay no update); the other one trains.
    model, result = train_jointly(backbone, documents, train_data, recipe(bucket_weights=(0.0, 1.0), weight_decay=0.0),
                                  states, show_progress=False)
    assert result.steps == 3
    assert torch.equal(wta(model, 1), wta(untrained, 1))
    assert not torch.equal(wta(model, 2), wta(untrained, 2))
    model, _ = train_jointly(backbone, documents, train_data, recipe(), states, show_progress=False)
    assert not torch.equal(wta(model, 1), wta(untrained, 1)) and not torch.equal(wta(model, 2), wta(untrained, 2))


def test_the_weight_grid_keeps_each_ranking_once_equal_weights_first():
    grid = weight_grid(3, PAPER_GRID)
    assert grid[0].tolist() == [1.0, 1.0, 1.0] and grid.max(axis=1).tolist() == [1.0] * len(grid)
    assert len({tuple(w) for w in grid}) == len(grid) == 4 ** 3 - 1 - 14  # 14 multiples of another vector
    assert [0.0, 0.0, 1.0] in grid.tolist() and [0.33, 0.0, 1.0] in grid.tolist()


def test_tune_weights_picks_the_vector_that_ranks_dev_best():
    # bucket 0 ranks each query's relevant document first, bucket 1 ranks it last
    relevant = np.array([[3.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    misleading = np.array([[0.0, 1.0, 8.0], [8.0, 0.0, 1.0]])
    qrels = {"a": {"d0": 1}, "b": {"d1": 1}}
    grid = weight_grid(2, (0.0, 0.5, 1.0))
    best, values = tune_weights([relevant, misleading], ["a", "b"], qrels, ["d0", "d1", "d2"], grid)
    assert best.tolist() == [1.0, 0.0] and max(values) == pytest.approx(1.0)
    assert values[0] < 1.0 and values[1] < 1.0  # equal and (1, 0.5) weights put the misleading document first
    run = rank(relevant + misleading, ["a", "b"], ["d0", "d1", "d2"], k=2)
    assert run.doc_ids("a") == ["d2", "d0"] and run.doc_ids("b") == ["d0", "d1"]


def test_bucket_scores_count_shared_dims_or_sum_products(tiny_encoder_session, mini_encoding):
    queries = mini_encoding[:3]
    binary = bucket_scores(queries, mini_encoding, "binary")
    weighted = bucket_scores(queries, mini_encoding, "weighted")
    for b in range(2):
        q, d = queries.buckets[b], mini_encoding.buckets[b]
        assert binary[b][0, 0] == q[0].nnz  # a document shares all its own dims
        assert weighted[b][1, 2] == pytest.approx(float(q[1].multiply(d[2]).sum()))
    with pytest.raises(UsageError, match="scoring"):
        bucket_scores(queries, mini_encoding, "dense")
