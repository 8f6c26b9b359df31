"""Whitening (zero mean, identity covariance), the isotropy metrics against direct formulas, whitened retrievers."""
import numpy as np
import pytest
import torch

from uhdsearch.experiments.builders import build_dense_whiten_seq, build_dense_whiten_tok
from uhdsearch.studies.isotropy import isotropy_report
from uhdsearch.baselines.whitening import Whitening, average_cosine, isotropy, pooled_embedder
from uhdsearch.encoder.states import compute_token_states

MAX_LENGTH = 64
rng = np.random.default_rng(0)


@pytest.fixture(scope="module")
def backbone(dense_backbone):
    return dense_backbone


@pytest.fixture(scope="module")
def states(dense_states):
    return dense_states


def anisotropic(n=3000, dim=16):
    # a narrow cone: correlated features, unequal scales, a large common offset
    mixing = np.eye(dim) + 0.5 * rng.standard_normal((dim, dim))
    return rng.standard_normal((n, dim)) * np.linspace(0.1, 2.0, dim) @ mixing + 4.0


def test_whitening_gives_zero_mean_identity_covariance_on_fit_data(states, backbone):
    for X in (anisotropic(), states.layer(backbone.n_layers).float().numpy()):
        Z = Whitening.fit(X).transform(X).astype(np.float64)
        assert np.abs(Z.mean(axis=0)).max() < 1e-3
        assert np.abs(np.cov(Z, rowvar=False) - np.eye(X.shape[1])).max() < 2e-3


def test_dimension_cut_keeps_the_highest_variance_directions():
    X = anisotropic()
    w = Whitening.fit(X, dim=5)
    Z = w.transform(X)
    assert Z.shape == (3000, 5)
    assert np.allclose(np.cov(Z, rowvar=False), np.eye(5), atol=1e-3)
    variances = np.var((X - X.mean(0)) @ w.matrix * np.sqrt(np.linalg.eigvalsh(np.cov(X, rowvar=False))[::-1][:5]),
                       axis=0)
    assert np.all(np.diff(variances) < 0)  # columns in order of decreasing variance
    assert torch.allclose(w.transform(torch.from_numpy(X).float()), torch.from_numpy(Z), atol=1e-4)


def test_isotropy_equals_its_definition_and_separates_isotropic_from_anisotropic():
    W = rng.standard_normal((50, 4)) * [1.0, 0.5, 0.3, 0.2]
    eigenvectors = np.linalg.eigh(W.T @ W)[1].T
    z = [np.exp(W @ c).sum() for c in eigenvectors]
    assert isotropy(W) == pytest.approx(min(z) / max(z), rel=1e-9)
    gaussian = rng.standard_normal((20000, 32))
    assert isotropy(gaussian) > 0.75
    skewed = anisotropic(20000, 32)
    assert isotropy(skewed) < 1e-3
    assert isotropy(Whitening.fit(skewed).transform(skewed)) > 0.75


def test_average_cosine_equals_the_pairwise_mean():
    W = rng.standard_normal((30, 5)) + 1.0
    U = W / np.linalg.norm(W, axis=1, keepdims=True)
    C = U @ U.T
    assert average_cosine(W) == pytest.approx((C.sum() - 30) / (30 * 29), abs=1e-12)
    assert average_cosine(rng.standard_normal((20000, 16))) == pytest.approx(0.0, abs=0.01)
    assert average_cosine(anisotropic()) > 0.5


def test_bad_input():
    with pytest.raises(ValueError, match="must be a 2-D array of at least 2 row vectors"):
        isotropy(np.ones(5))
    with pytest.raises(ValueError, match=r"dim=9 must satisfy 0 < dim <= 4"):
        Whitening.fit(np.ones((10, 4)), dim=9)
    with pytest.raises(ValueError, match="width 3 but this whitening was fit on width 4"):
        Whitening.fit(rng.standard_normal((10, 4))).transform(np.ones((2, 3)))


def test_whitened_dense_scores_are_cosines_of_whitened_vectors(backbone, states, mini_data):
    last = backbone.n_layers
    docs = list(mini_data.corpus.values())
    seq = build_dense_whiten_seq(mini_data.corpus, backbone_dir=backbone, states=states, max_length=MAX_LENGTH)
    tok = build_dense_whiten_tok(mini_data.corpus, backbone_dir=backbone, states=states, max_length=MAX_LENGTH)
    tokens = states.layer(last).float()
    owner = torch.from_numpy(np.repeat(np.arange(states.n), np.diff(states.offsets)))
    lengths = torch.from_numpy(np.diff(states.offsets)).float()[:, None]

    def mean(x):
        return torch.zeros(states.n, x.shape[1]).index_add_(0, owner, x) / lengths

    w_seq = Whitening.fit(mean(tokens).numpy())
    w_tok = Whitening.fit(tokens.numpy())
    query = mini_data.queries[2]
    q_tokens = compute_token_states(backbone, [query.text], [last], MAX_LENGTH, show_progress=False).layer(last).float()

    def unit(v):
        return v / np.linalg.norm(v)

    expected = {  # (document vectors, query vector) as Jung et al. §4.1 define them
        seq: (w_seq.transform(mean(tokens)).numpy(), w_seq.transform(q_tokens.mean(0, keepdim=True))[0].numpy()),
        tok: (mean(w_tok.transform(tokens)).numpy(), w_tok.transform(q_tokens).mean(0).numpy()),
    }
    for retriever, (doc_vectors, query_vector) in expected.items():
        got = {h.doc_id: h.score for h in retriever.search([query], k=len(docs))[query.query_id]}
        for row in range(0, 400, 40):
            assert got[docs[row].doc_id] == pytest.approx(float(unit(doc_vectors[row]) @ unit(query_vector)), abs=1e-4)


def test_pooled_embedder_without_transforms_is_mean_cosine():
    tokens = torch.tensor([[1.0, 0.0], [3.0, 4.0], [0.0, 2.0]])
    out = pooled_embedder()(tokens, torch.tensor([0, 0, 1]), 2)
    assert torch.allclose(out, torch.tensor([[2 ** -0.5, 2 ** -0.5], [0.0, 1.0]]))


def test_isotropy_report_whitening_raises_isotropy(backbone, mini_data):
    documents = list(mini_data.corpus.values())
    fit, held_out = documents[:-40], [d.full_text for d in documents[-40:]]
    report = isotropy_report(fit, backbone, None, held_out, max_length=MAX_LENGTH, flows=False, fit_tokens=5000)
    assert set(report) == {"sequence/raw", "sequence/whiten", "token/raw", "token/whiten"}
    for level in ("sequence", "token"):
        raw, white = report[f"{level}/raw"], report[f"{level}/whiten"]
        assert raw["texts measured"] == 32 * min(32, len(fit) // 32) and raw["texts measured held-out"] == 32
        for suffix in ("", " held-out"):
            assert 0 < raw[f"I(W){suffix}"] < white[f"I(W){suffix}"] < 1
            assert abs(white[f"avg_cos{suffix}"]) < raw[f"avg_cos{suffix}"]
        assert raw["I(W) held-out"] != pytest.approx(raw["I(W)"], rel=1e-4)  # other texts were measured


def test_isotropy_report_needs_a_full_batch(backbone, states, mini_data):
    with pytest.raises(ValueError, match="fewer than one batch of 32"):
        isotropy_report(mini_data.corpus, backbone, states, ["one text", "another"], max_length=MAX_LENGTH,
                        flows=False, fit_tokens=5000)


def test_isotropy_is_measured_on_unit_rows_per_batch(backbone, states, mini_data):
    """Scaling every state leaves the report unchanged (rows are normalized), batching changes I(W)."""
    import dataclasses

    scaled = dataclasses.replace(states, states=[s * 7 for s in states.states])
    kwargs = dict(max_length=MAX_LENGTH, flows=False, fit_tokens=5000)
    one = isotropy_report(mini_data.corpus, backbone, states, **kwargs)
    seven = isotropy_report(mini_data.corpus, backbone, scaled, **kwargs)
    assert seven["token/raw"]["I(W)"] == pytest.approx(one["token/raw"]["I(W)"], rel=1e-3)
    assert seven["sequence/raw"]["I(W)"] == pytest.approx(one["sequence/raw"]["I(W)"], rel=1e-3)
    whole = isotropy_report(mini_data.corpus, backbone, states, batch_texts=len(mini_data.corpus), **kwargs)
    assert whole["token/raw"]["I(W)"] != pytest.approx(one["token/raw"]["I(W)"], rel=1e-3)


def test_uhd_over_whitened_states_equals_a_wta_with_whitening_folded_in(dense_backbone, states, mini_data):
    """Whitening is affine, so WTA(whiten(x)) equals a WTA with weight W M^T and bias b - W M^T mu on raw x."""
    import copy

    from uhdsearch.experiments.builders import build_uhd_binary

    searcher = build_uhd_binary(mini_data.corpus, backbone_dir=dense_backbone, states=states, max_length=MAX_LENGTH,
                                whiten=True, dim=1024, wta_k=8, wta_dtype="float32")
    model = searcher.encoder
    last = dense_backbone.n_layers
    whitening = model.state_transforms[last].__self__
    assert float(model.buckets.wta[str(last)].bias.detach().abs().max()) < 1e-3  # whitened states have zero mean
    folded = copy.deepcopy(model)
    folded.state_transforms = {}
    wta = folded.buckets.wta[str(last)]
    with torch.no_grad():
        M, mu = torch.from_numpy(whitening.matrix), torch.from_numpy(whitening.mean)
        wta.bias.copy_(wta.bias - wta.weight @ M.t() @ mu)
        wta.weight.copy_(wta.weight @ M.t())
    texts = [q.text for q in mini_data.queries[:5]]
    a = model.encode_query(texts).buckets[0].toarray()
    b = folded.encode_query(texts).buckets[0].toarray()
    assert (a > 0).sum() > 0
    assert np.allclose(a, b, atol=1e-3)
    run = searcher.search(mini_data.queries[:3], k=5)
    assert all(len(run[q.query_id]) == 5 for q in mini_data.queries[:3])
