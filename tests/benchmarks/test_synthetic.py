"""Synthetic UHD-shaped postings (benchmarks/speed/search_speed.py's generator): structure, marginals, determinism."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.lib.synthetic import DensityProfile, SyntheticPostings


def zipf_profile(dim: int = 512, mean_length: int = 60, seed: int = 0) -> DensityProfile:
    """Zipf-like document frequencies whose sum equals the sampled lengths' mean, as in a real profile."""
    rng = np.random.default_rng(seed)
    shares = 1.0 / np.arange(1, dim + 1) ** 0.8
    shares = np.minimum(shares * mean_length / shares.sum(), 1.0)
    rng.shuffle(shares)
    lengths = rng.normal(1.0, 0.25, 500) * shares.sum()
    lengths = np.clip(np.round(lengths * shares.sum() / lengths.mean()), 1, dim).astype(int)
    return DensityProfile(shares, lengths, np.quantile(rng.gamma(2.0, 0.01, 5000), np.linspace(0, 1, 101)))


def concat(synth: SyntheticPostings, max_postings: int = 1 << 26) -> sp.csc_matrix:
    blocks = list(synth.blocks(max_postings))
    assert blocks[0].first_dim == 0
    for a, b in zip(blocks, blocks[1:]):
        assert b.first_dim == a.first_dim + a.indptr.shape[0] - 1
    sizes = [b.docs.shape[0] for b in blocks]
    indptr = np.concatenate([[0]] + [b.indptr[1:] + off for b, off in zip(blocks, np.cumsum([0] + sizes[:-1]))])
    docs = np.concatenate([b.docs for b in blocks])
    weights = np.concatenate([b.weights for b in blocks])
    return sp.csc_matrix((weights, docs, indptr), shape=(synth.n_documents, synth.dim))


def check_structure(synth: SyntheticPostings, m: sp.csc_matrix) -> None:
    assert m.indptr[-1] == synth.n_postings
    np.testing.assert_array_equal(np.diff(m.indptr), synth.document_frequencies())
    for d in range(m.shape[1]):
        col = m.indices[m.indptr[d]:m.indptr[d + 1]]
        assert np.all(np.diff(col) > 0), f"dim {d}: docs not strictly ascending"
    if m.nnz:
        assert 0 <= m.indices.min() and m.indices.max() < synth.n_documents
        q = synth.profile.value_quantiles
        assert q[0] - 1e-7 <= m.data.min() and m.data.max() <= q[-1] + 1e-7


def test_blocks_form_valid_postings_whatever_the_block_size():
    synth = SyntheticPostings(zipf_profile(), n_documents=3000, seed=3)
    whole = concat(synth)
    check_structure(synth, whole)
    small = concat(synth, max_postings=2000)  # many ranges: same postings and weights
    assert len(list(synth.blocks(2000))) > 10
    np.testing.assert_array_equal(small.indptr, whole.indptr)
    np.testing.assert_array_equal(small.indices, whole.indices)
    np.testing.assert_array_equal(small.data, whole.data)


def test_seeded_and_reproducible():
    profile = zipf_profile()
    a = concat(SyntheticPostings(profile, 1000, seed=1))
    b = concat(SyntheticPostings(profile, 1000, seed=1))
    c = concat(SyntheticPostings(profile, 1000, seed=2))
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.data, b.data)
    assert a.nnz != c.nnz or not np.array_equal(a.indices, c.indices)


def test_marginals_match_the_profile():
    profile = zipf_profile(dim=1024, mean_length=120)
    synth = SyntheticPostings(profile, 20_000, seed=0)
    m = concat(synth)
    lengths = np.diff(m.tocsr().indptr)
    assert abs(lengths.mean() / profile.doc_lengths.mean() - 1) < 0.02
    for q in (0.1, 0.5, 0.9):  # per-document lengths follow the sample, not just its mean
        assert abs(np.quantile(lengths, q) - np.quantile(profile.doc_lengths, q)) <= 0.05 * profile.doc_lengths.mean()
    df = np.diff(m.indptr) / synth.n_documents
    assert np.abs(df - profile.doc_frequency).max() < 0.02
    assert np.corrcoef(df, profile.doc_frequency)[0, 1] > 0.995
    values = np.quantile(m.data, [0.1, 0.5, 0.9])
    expected = np.interp([0.1, 0.5, 0.9], np.linspace(0, 1, profile.value_quantiles.size), profile.value_quantiles)
    np.testing.assert_allclose(values, expected, rtol=0.05)


def test_real_encoding_profile(tiny_encoder_session, mini_data):
    """A profile of real (tiny-encoder) vectors: generated documents are as long as the real ones."""
    texts = [d.full_text for d in list(mini_data.corpus.values())[:80]]
    real = tiny_encoder_session.encode_document(texts, show_progress=False).buckets[0]
    profile = DensityProfile.from_vectors(real)
    np.testing.assert_array_equal(profile.doc_lengths, np.diff(real.indptr))
    assert profile.doc_frequency.sum() == pytest.approx(real.nnz / real.shape[0])
    synth = SyntheticPostings(profile, 4000, seed=0)
    m = concat(synth)
    check_structure(synth, m)
    assert synth.n_postings / 4000 == pytest.approx(real.nnz / real.shape[0], rel=0.02)


def test_certain_and_impossible_dims():
    profile = DensityProfile(np.array([1.0, 0.0, 0.5, 1.0, 0.5]), np.array([3]), np.array([0.5, 0.5]))
    m = concat(SyntheticPostings(profile, 500, seed=0))
    df = np.diff(m.indptr)
    assert df[0] == 500 and df[3] == 500 and df[1] == 0
    assert abs(df[2] - 250) < 60 and abs(df[4] - 250) < 60
    assert np.all(m.data == 0.5)


@settings(max_examples=25, deadline=None)
@given(n_documents=st.integers(1, 300), dim=st.integers(1, 40), seed=st.integers(0, 2**20),
       data=st.data())
def test_any_small_profile_gives_valid_postings(n_documents, dim, seed, data):
    shares = np.array(data.draw(st.lists(st.floats(0, 1), min_size=dim, max_size=dim)))
    lengths = np.array(data.draw(st.lists(st.integers(0, dim), min_size=1, max_size=20)))
    synth = SyntheticPostings(DensityProfile(shares, lengths, np.array([0.1, 0.2, 0.9])), n_documents, seed=seed)
    check_structure(synth, concat(synth, max_postings=data.draw(st.integers(1, 500))))


@pytest.mark.parametrize("kwargs, match", [
    ({"doc_frequency": np.array([0.5, 1.5])}, "shares in"),
    ({"doc_lengths": np.array([3])}, "counts in 0..2"),
    ({"value_quantiles": np.array([0.2, 0.1])}, "non-decreasing"),
])
def test_bad_profiles_are_refused(kwargs, match):
    base = {"doc_frequency": np.array([0.5, 0.5]), "doc_lengths": np.array([1]), "value_quantiles": np.array([0, 1.0])}
    with pytest.raises(ValueError, match=match):
        DensityProfile(**(base | kwargs))


def test_no_documents_is_refused():
    with pytest.raises(ValueError, match="n_documents=0 must be positive"):
        SyntheticPostings(zipf_profile(), 0)
