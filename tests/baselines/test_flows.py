"""NICE and Glow: invertible within 1e-4, log-likelihood rises in training, log-det equals the Jacobian's."""
import numpy as np
import pytest
import torch

from uhdsearch.baselines.dense_systems import build_dense_glow, build_dense_nice
from uhdsearch.baselines.flows import NICE, Glow
from uhdsearch.baselines.whitening import average_cosine, isotropy

MAX_LENGTH = 64


@pytest.fixture(scope="module")
def backbone(dense_backbone):
    return dense_backbone


@pytest.fixture(scope="module")
def states(dense_states):
    return dense_states


@pytest.fixture(scope="module")
def pooled(states, backbone):
    """(400, 128) mean-pooled last-layer vectors of the mini corpus: real, anisotropic representations."""
    tokens = states.layer(backbone.n_layers).float()
    owner = torch.from_numpy(np.repeat(np.arange(states.n), np.diff(states.offsets)))
    sums = torch.zeros(states.n, tokens.shape[1]).index_add_(0, owner, tokens)
    return sums / torch.from_numpy(np.diff(states.offsets)).float()[:, None]


FLOWS = {
    "nice": lambda dim: NICE(dim, n_couplings=4, hidden=64, n_layers=3),
    "glow": lambda dim: Glow(dim, n_levels=2, depth=2, hidden=64),
}


@pytest.fixture(scope="module")
def fitted(pooled):
    out = {}
    for name, make in FLOWS.items():
        flow = make(pooled.shape[1])
        out[name] = (flow, flow.fit(pooled, epochs=4, batch_size=64, show_progress=False))
    return out


@pytest.mark.parametrize("name", list(FLOWS))
def test_log_likelihood_rises_during_training(fitted, name):
    history = fitted[name][1]
    assert len(history) == 5
    assert history[-1] > history[0] + 10  # nats per 128-dim vector
    assert history[-1] > history[1]


@pytest.mark.parametrize("name", list(FLOWS))
def test_trained_flow_is_invertible(fitted, pooled, name):
    flow = fitted[name][0]
    z = flow.transform(pooled)
    assert z.shape == pooled.shape
    with torch.no_grad():
        back = flow.inverse(z)
    assert (back - pooled).abs().max() < 1e-4
    assert isinstance(flow.transform(pooled.numpy()), np.ndarray)


@pytest.mark.parametrize("name", list(FLOWS))
def test_trained_flow_makes_representations_more_isotropic(fitted, pooled, name):
    z = fitted[name][0].transform(pooled)
    assert isotropy(z) > isotropy(pooled)
    assert abs(average_cosine(z)) < average_cosine(pooled)


@pytest.mark.parametrize("make", [lambda: NICE(5, n_couplings=3, hidden=8, n_layers=2),
                                  lambda: Glow(5, n_levels=2, depth=2, hidden=8)])
def test_log_likelihood_is_the_change_of_variables(make):
    """log p(x) = log N(f(x)) + log|det df/dx|, against a numerical Jacobian (odd width, two levels)."""
    torch.manual_seed(0)
    flow = make().double()
    X = torch.randn(300, 5, dtype=torch.float64) * torch.tensor([3.0, 1.0, 0.2, 1.0, 2.0], dtype=torch.float64) + 1
    with torch.no_grad():
        flow.initialize(X)
        for p in flow.parameters():  # leave the identity start: every coupling does something
            p.add_(0.1 * torch.randn_like(p))
    x = X[:3]
    for row in x:
        jacobian = torch.autograd.functional.jacobian(lambda v: flow(v[None])[0][0], row)
        with torch.no_grad():
            z, logdet = flow(row[None])
        assert float(logdet[0]) == pytest.approx(float(torch.linalg.slogdet(jacobian)[1]), abs=1e-8)
        with torch.no_grad():
            got = float(flow.log_likelihood(row[None])[0])
            back = flow.inverse(z)[0]
        expected = -0.5 * (z.pow(2).sum() + 5 * np.log(2 * np.pi)) + logdet[0]
        assert got == pytest.approx(float(expected), abs=1e-10)
        assert torch.allclose(back, row, atol=1e-10)


def test_bad_input(pooled):
    with pytest.raises(ValueError, match=r"X must be \(n >= 2, 7\)"):
        NICE(7, hidden=8).fit(pooled)
    with pytest.raises(ValueError, match="width 128 but this flow has dim 7"):
        Glow(7, hidden=8).transform(pooled)
    with pytest.raises(ValueError, match="at least 2 features"):
        NICE(1)
    with pytest.raises(ValueError, match="too small for 3 levels"):
        Glow(3, n_levels=3)


@pytest.mark.parametrize("build", [build_dense_nice, build_dense_glow])
def test_flow_retrievers_search(build, backbone, states, mini_data):
    retriever = build(mini_data.corpus, backbone_dir=backbone, states=states, max_length=MAX_LENGTH, epochs=1,
                      flow_options={"hidden": 32})
    queries = mini_data.queries[:4]
    run = retriever.search(queries, k=7)
    for q in queries:
        scores = [h.score for h in run[q.query_id]]
        assert len(scores) == 7 and scores == sorted(scores, reverse=True)
        assert all(-1.0001 <= s <= 1.0001 for s in scores)  # cosines of transformed vectors
    assert len(retriever.search([], k=3)) == 0
