"""The context vote of inference-free queries (encoder/lookup_vote.py): choices by hand, against a loop over the
definition, in the encoder, through save/load, and bad settings."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.query.table import LookupEncoder
from uhdsearch.encoder.query.corpus_table import CorpusTable
from uhdsearch.encoder.query.vote import check_vote, vote_pool
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.errors import ModelFormatError, UsageError


def by_definition(rows: np.ndarray, owner: np.ndarray, n_texts: int, vote: float, winners: int) -> np.ndarray:
    """A loop over the module's definition: scaled rows, own + vote x the other tokens' sum, winners by score then
    the lower dim, max-pooled per text."""
    scaled = np.array([r / r.max() if r.max() > 0 else r for r in rows])
    out = np.zeros((n_texts, rows.shape[1]))
    for t, row in enumerate(scaled):
        others = sum((scaled[u] for u in range(len(rows)) if u != t and owner[u] == owner[t]), np.zeros(rows.shape[1]))
        candidates = sorted(np.flatnonzero(row > 0), key=lambda d: (-(row[d] + vote * others[d]), d))
        for d in candidates[:winners]:
            out[owner[t], d] = max(out[owner[t], d], row[d] + vote * others[d])
    return out


def test_the_other_tokens_choose_among_a_tokens_candidates():
    # token 0 prefers dim 0 alone; tokens 1 and 2 both point to dim 3, token 0's second candidate
    rows = np.array([[1.0, 0, 0, 0.8, 0], [0, 0.5, 0, 1.0, 0], [0, 0, 2.0, 1.0, 0], [0, 0, 0, 0, 3.0]], np.float32)
    owner = np.array([0, 0, 0, 1])  # the last token is another text's: it votes for nothing in text 0
    alone = vote_pool(sp.csr_matrix(rows), owner, 2, 0.0, 1).toarray()
    assert np.flatnonzero(alone[0]).tolist() == [0, 2, 3] and alone[1].tolist() == [0, 0, 0, 0, 1.0]
    voted = vote_pool(sp.csr_matrix(rows), owner, 2, 0.5, 1).toarray()
    # token 0: dim 0 scores 1.0, dim 3 0.8 + 0.5 x (1.0 + 0.5) = 1.55; token 2: dim 2 1.0, dim 3 0.5 + 0.5 x 1.8
    assert np.flatnonzero(voted[0]).tolist() == [3]
    assert voted[0, 3] == pytest.approx(1.0 + 0.5 * (0.8 + 0.5))  # token 1's own score, the largest of three
    assert np.allclose(voted, by_definition(rows, owner, 2, 0.5, 1))


def test_ties_go_to_the_lower_dim():
    rows = sp.csr_matrix(np.array([[0, 1.0, 0, 1.0, 1.0]], np.float32))
    assert np.flatnonzero(vote_pool(rows, np.array([0]), 1, 1.0, 2).toarray()).tolist() == [1, 3]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_vote_pool_matches_the_definition(data):
    n_tokens = data.draw(st.integers(1, 6))
    dim = data.draw(st.integers(1, 9))
    cells = st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0, 2.0])  # repeats make ties
    rows = np.array(data.draw(st.lists(st.lists(cells, min_size=dim, max_size=dim), min_size=n_tokens,
                                       max_size=n_tokens)), np.float32)
    owner = np.sort(np.array(data.draw(st.lists(st.integers(0, 2), min_size=n_tokens, max_size=n_tokens))))
    vote = data.draw(st.sampled_from([0.0, 0.5, 1.0, 3.0]))
    winners = data.draw(st.integers(1, dim))
    got = vote_pool(sp.csr_matrix(rows), owner, 3, vote, winners).toarray()
    assert np.allclose(got, by_definition(rows, owner, 3, vote, winners), atol=1e-6)


def test_explicit_zeros_are_no_candidates_and_bad_rows_are_refused():
    zero_first = sp.csr_matrix((np.array([0.0, 1.0, 2.0], np.float32), (np.array([0, 1, 1]), np.array([1, 2, 3]))),
                               shape=(2, 4))
    got = vote_pool(zero_first, np.array([0, 0]), 1, 1.0, 2).toarray()
    assert np.all(np.isfinite(got)) and np.flatnonzero(got[0]).tolist() == [2, 3]  # token 0 has no candidate
    with pytest.raises(ValueError, match="finite values > 0"):
        vote_pool(sp.csr_matrix(np.array([[1.0, -0.5]], np.float32)), np.array([0]), 1, 1.0, 1)
    with pytest.raises(ValueError, match="one text number in 0..0 per row; got 1 for 2 rows"):
        vote_pool(zero_first, np.array([0]), 1, 1.0, 1)
    with pytest.raises(ValueError, match="got 2 for 2 rows"):
        vote_pool(zero_first, np.array([0, 1]), 1, 1.0, 1)  # text 1 of one text


@pytest.mark.parametrize("vote, winners, keep, why", [(0.5, 2.0, 8, "1..keep"), (0.5, True, 8, "1..keep"),
                                                      (0.5, None, 8, "together"), (None, 4, 8, "together"),
                                                      (0.5, 4, None, "together"), (-1.0, 4, 8, "finite"),
                                                      (float("nan"), 4, 8, "finite"), (0.5, 9, 8, "1..keep"),
                                                      (0.5, 0, 8, "1..keep")])
def test_bad_vote_settings_are_refused(vote, winners, keep, why):
    with pytest.raises(UsageError, match=why):
        check_vote(vote, winners, keep)


@pytest.fixture(scope="module")
def model():
    return UHDEncoder.new(config=EncoderConfig(dim=1024, wta_k=8, query_k=None))


def test_the_encoder_votes_over_its_neighbour_rows_and_keeps_the_vote_through_save_and_load(model, tmp_path):
    texts = ["bone density falls in older women.", "older women lose bone density with age.",
             "density of bone mineral in women."]
    table = CorpusTable.from_sentences(model, texts, show_progress=False, neighbours=True)
    rows, unigrams = table.neighbours.rows(keep=8), table.tables("winners", 8)
    tok = model.backbone.tokenizer
    plain = LookupEncoder(unigrams, tok, model.config, model.digest(), neighbours=rows, keep=8)
    voted = LookupEncoder(unigrams, tok, model.config, model.digest(), neighbours=rows, keep=8, vote=1.0, winners=3)
    queries = ["bone density in women", "older women"]
    got = voted.encode(queries).buckets[0]
    # by hand: each position's candidate row (the plain encoder's per-token rows), then the definition
    encoded = tok(queries)["input_ids"]
    ids = np.concatenate([np.asarray(x) for x in encoded])
    positions = np.flatnonzero(~np.isin(ids, tok.all_special_ids))
    owner = np.searchsorted(np.cumsum([len(x) for x in encoded]), positions, side="right")
    candidates = rows[0].token_rows(ids, positions, unigrams[0], 8).toarray()
    assert np.allclose(got.toarray(), by_definition(candidates, owner, 2, 1.0, 3), atol=1e-6)
    # at most 3 winners a token, where the plain rows keep up to 8
    assert np.all(got.getnnz(axis=1) < plain.encode(queries).buckets[0].getnnz(axis=1))
    voted.save(tmp_path)
    again = LookupEncoder.load(tmp_path, model)
    assert (again.vote, again.winners) == (1.0, 3) and (again.encode(queries).buckets[0] != got).nnz == 0
    plain.save(tmp_path)  # a table without a vote loads without one
    assert LookupEncoder.load(tmp_path, model).vote is None
    np.savez(tmp_path / "query_lookup.npz", **{**dict(np.load(tmp_path / "query_lookup.npz")),
                                               "vote": np.array(0.5), "winners": np.array(99)})
    with pytest.raises(ModelFormatError, match="query_lookup.npz.*winners=99"):
        LookupEncoder.load(tmp_path, model)
    arrays = dict(np.load(tmp_path / "query_lookup.npz"))
    for broken, why in (({"vote": np.array([0.5, 1.0]), "winners": np.array(3)}, "vote .* is not one number"),
                        ({"vote": np.array(0.5), "winners": np.array(2.7)}, "winners .*2.7.* is not one integer")):
        np.savez(tmp_path / "query_lookup.npz", **{**arrays, **broken})
        with pytest.raises(ModelFormatError, match=why):
            LookupEncoder.load(tmp_path, model)
    unigram_only = {k: v for k, v in arrays.items() if "_n" not in k and k not in ("keep", "vocab", "vote", "winners")}
    np.savez(tmp_path / "query_lookup.npz", **unigram_only, vote=np.array(0.5), winners=np.array(3))
    with pytest.raises(ModelFormatError, match="a context vote without neighbour rows"):
        LookupEncoder.load(tmp_path, model)
    with pytest.raises(UsageError, match="together"):
        LookupEncoder(unigrams, tok, model.config, model.digest(), vote=1.0, winners=3)  # no neighbour rows
