import json

import numpy as np
import pytest

from uhdsearch.errors import ModelFormatError, UsageError
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.search.bucket_predictor import FILE, BucketWeightPredictor
from uhdsearch.search.searcher import Searcher

GRID = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.33, 1.0]])


@pytest.fixture(scope="module")
def index(tiny_encoder_session, mini_data, mini_encoding):
    return BinaryIndex.from_encoding(mini_encoding, list(mini_data.corpus), None, tiny_encoder_session.digest())


def forced(row: int, scoring: str = "binary") -> BucketWeightPredictor:
    """A predictor whose features do not matter: it always picks grid row `row`."""
    intercept = np.zeros(len(GRID))
    intercept[row] = 1.0
    return BucketWeightPredictor(GRID, scoring, np.zeros(6), np.ones(6), np.zeros((6, len(GRID))), intercept)


def test_features_are_each_buckets_activity_and_best_matches(tiny_encoder_session, mini_data, index):
    queries = tiny_encoder_session.encode([q.text for q in mini_data.queries[:5]], "query")
    features = BucketWeightPredictor.features(queries, index, "binary")
    documents = index.document_vectors().binarize()
    for b in range(2):
        q = queries.binarize().buckets[b]
        overlaps = np.sort((q @ documents.buckets[b].T).toarray(), axis=1)[:, ::-1]
        active = np.diff(q.indptr)
        assert np.allclose(features[:, 3 * b], np.log1p(active))
        assert np.allclose(features[:, 3 * b + 1], overlaps[:, 0] / active)
        assert np.allclose(features[:, 3 * b + 2], overlaps[:, 9] / active)


@pytest.mark.parametrize("row", [1, 3])
def test_a_predictor_forced_to_one_vector_searches_as_those_fixed_weights(tiny_encoder_session, mini_data, index,
                                                                         row):
    queries = mini_data.queries[:20]
    fixed = Searcher(tiny_encoder_session, index, bucket_weights=GRID[row], length_norm=None).search(queries, k=10)
    predicted = Searcher(tiny_encoder_session, index, bucket_predictor=forced(row)).search(queries, k=10)
    assert predicted.results == fixed.results
    other = Searcher(tiny_encoder_session, index, bucket_weights=GRID[2], length_norm=None).search(queries, k=10)
    assert other.results != fixed.results  # the weights matter on this data, so the check can fail


def test_each_query_is_searched_with_the_vector_chosen_for_it(tiny_encoder_session, mini_data, index):
    queries = mini_data.queries[:20]
    # the choice follows bucket 1's activity: above the mean -> row 1, below -> row 2
    coef = np.zeros((6, len(GRID)))
    coef[0, 1], coef[0, 2] = 1.0, -1.0
    encoded = tiny_encoder_session.encode([q.text for q in queries], "query")
    features = BucketWeightPredictor.features(encoded, index, "binary")
    predictor = BucketWeightPredictor(GRID, "binary", features.mean(axis=0), np.ones(6), coef, np.zeros(len(GRID)))
    choice = predictor.choose(features)
    assert set(choice.tolist()) == {1, 2}
    run = Searcher(tiny_encoder_session, index, bucket_predictor=predictor).search(queries, k=10)
    for query, row in zip(queries, choice):
        alone = Searcher(tiny_encoder_session, index, bucket_weights=GRID[row], length_norm=None).search([query], k=10)
        assert run[query.query_id] == alone[query.query_id]


def test_fit_learns_which_vector_suits_which_query():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(200, 6))
    # bucket 0 alone is perfect where feature 1 is positive, bucket 1 alone elsewhere; equal weights in between
    good = features[:, 1] > 0
    utilities = np.stack([np.full(200, 0.5), good.astype(float), (~good).astype(float), np.full(200, 0.4)], axis=1)
    predictor = BucketWeightPredictor.fit(features, utilities, GRID, "binary", alpha=1.0)
    choice = predictor.choose(features)
    assert np.mean(choice == np.where(good, 1, 2)) > 0.9
    with pytest.raises(UsageError, match="disagree"):
        BucketWeightPredictor.fit(features, utilities[:, :3], GRID, "binary")


def test_save_load_round_trip_and_bad_files(tmp_path):
    assert BucketWeightPredictor.load(tmp_path) is None
    predictor = forced(3)
    predictor.save(tmp_path)
    loaded = BucketWeightPredictor.load(tmp_path)
    assert loaded.scoring == "binary" and np.array_equal(loaded.grid, GRID)
    assert np.array_equal(loaded.choose(np.zeros((2, 6))), [3, 3])
    obj = json.loads((tmp_path / FILE).read_text())
    obj["coef"] = obj["coef"][:-1]
    (tmp_path / FILE).write_text(json.dumps(obj))
    with pytest.raises(ModelFormatError, match="coef has shape"):
        BucketWeightPredictor.load(tmp_path)
    (tmp_path / FILE).write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ModelFormatError, match="not a bucket predictor"):
        BucketWeightPredictor.load(tmp_path)


def test_searcher_refuses_a_predictor_that_does_not_fit(tiny_encoder_session, mini_data, mini_encoding, index):
    three = BucketWeightPredictor(np.ones((1, 3)), "binary", np.zeros(9), np.ones(9), np.zeros((9, 1)), np.zeros(1))
    with pytest.raises(UsageError, match="weighs 3 buckets"):
        Searcher(tiny_encoder_session, index, bucket_predictor=three)
    weighted = WeightedIndex.from_encoding(mini_encoding, list(mini_data.corpus), None, tiny_encoder_session.digest())
    with pytest.raises(UsageError, match="fitted for binary"):
        Searcher(tiny_encoder_session, weighted, bucket_predictor=forced(0))
    searcher = Searcher(tiny_encoder_session, index, bucket_predictor=forced(0))
    with pytest.raises(UsageError, match="rerank"):
        searcher.rerank(mini_data.queries[:2], searcher.search(mini_data.queries[:2], k=5))
    with pytest.raises(UsageError, match="max_df or idf"):
        Searcher(tiny_encoder_session, index, bucket_predictor=forced(0), max_df=0.3)


def test_an_index_smaller_than_the_feature_depth_scores_the_missing_ranks_zero(tiny_encoder_session, mini_data,
                                                                               mini_encoding):
    from uhdsearch.sparse import SparseEncoding

    few = BinaryIndex.from_encoding(SparseEncoding([b[:4] for b in mini_encoding.buckets]), list(mini_data.corpus)[:4],
                                    None, tiny_encoder_session.digest())
    queries = tiny_encoder_session.encode([q.text for q in mini_data.queries[:3]], "query")
    features = BucketWeightPredictor.features(queries, few, "binary")
    assert features.shape == (3, 6) and np.all(features[:, [2, 5]] == 0.0)  # the 10th-best of 4 documents
    run = Searcher(tiny_encoder_session, few, bucket_predictor=forced(1)).search(mini_data.queries[:3], k=10)
    assert all(len(hits) <= 4 for hits in run.results.values())
