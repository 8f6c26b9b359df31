"""NICE and Glow: invertible within 1e-4, log-likelihood rises in training, log-det equals the Jacobian's;
token-wise NICE keeps a sane scale when the backbone has dead units."""
import copy
import logging

import numpy as np
import pytest
import torch

from uhdsearch.baselines.bm25 import BM25Retriever
from uhdsearch.experiments.builders import build_dense_glow, build_dense_nice, build_sum_of_max
from uhdsearch.baselines.flows import NICE, Glow
from uhdsearch.baselines.whitening import average_cosine, isotropy, sample_tokens
from uhdsearch.encoder.states import compute_token_states
from uhdsearch.evaluation.metrics import evaluate

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


def test_a_fit_that_lowers_the_log_likelihood_warns(caplog):
    torch.manual_seed(0)
    X = torch.randn(2000, 6) * torch.tensor([3.0, 1.0, 0.2, 1.0, 2.0, 0.5])
    with caplog.at_level(logging.WARNING, logger="uhdsearch.baselines.flows"):
        history = NICE(6, hidden=16, n_layers=2).fit(X, epochs=2, batch_size=64, learning_rate=1.0,
                                                      show_progress=False)
    assert history[-1] < history[0]
    assert "NICE training lowered the mean log-likelihood" in caplog.text
    assert "lower learning_rate=1" in caplog.text


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


# ------------------------------------------------------------------ a backbone with dead units (all-MiniLM-L6-v2)
DEAD_UNITS = [5, 77]


@pytest.fixture(scope="module")
def dead_unit_backbone(backbone):
    """The tiny backbone with two dead last-layer units, as all-MiniLM-L6-v2 has three (LayerNorm gain and bias
    about 1e-32): those features are constant over every token. A copy, so other tests keep the real one."""
    dead = copy.deepcopy(backbone)
    norm = dead.model.encoder.layer[-1].output.LayerNorm
    with torch.no_grad():
        norm.weight[DEAD_UNITS] = 0.0
        norm.bias[DEAD_UNITS] = 0.0
    return dead.eval()


@pytest.fixture(scope="module")
def dead_unit_states(dead_unit_backbone, mini_data):
    return compute_token_states(dead_unit_backbone, [d.full_text for d in mini_data.corpus.values()],
                                [dead_unit_backbone.n_layers], MAX_LENGTH, show_progress=False)


@pytest.mark.parametrize("kind", ["nice", "glow"])
def test_token_wise_flow_keeps_its_scale_with_dead_units(dead_unit_backbone, dead_unit_states, caplog, kind):
    """Before NICE standardized its input, a constant feature got a gain of 1e6 in the final scaling and any
    coupling output on it dominated z (measured: log-likelihood -104 -> -207,861 nats, median |z| 638,
    98.7% of |z|^2 in one coordinate; now -114 -> -101, 10.5 and 6%; NICE's numbers). Glow's ActNorm had the
    same 1e6 gain (its fit lowered the log-likelihood, -103 -> -133)."""
    tokens = dead_unit_states.layer(dead_unit_backbone.n_layers).float()
    assert float(tokens[:, DEAD_UNITS].abs().max()) == 0.0
    flow = NICE(tokens.shape[1], hidden=64, n_layers=3) if kind == "nice" else Glow(tokens.shape[1], hidden=64)
    with caplog.at_level(logging.WARNING, logger="uhdsearch.baselines.flows"):
        history = flow.fit(sample_tokens(tokens, 10_000), epochs=2, show_progress=False)
    assert "lowered the mean log-likelihood" not in caplog.text
    assert history[-1] > history[0] + 5 and history[-1] > history[1]  # nats per 128-dim token
    z = flow.transform(sample_tokens(tokens, 5_000, seed=1))
    norms = z.norm(dim=1)
    dim = tokens.shape[1]
    assert 0.5 * dim ** 0.5 < float(norms.median()) < 2 * dim ** 0.5  # ~sqrt(dim) for a standard normal z
    assert float((z.pow(2).max(dim=1).values / norms.pow(2)).median()) < 0.2  # no coordinate dominates
    if kind == "nice":  # Glow's invertible linear layers and splits mix the coordinates
        assert float(z[:, DEAD_UNITS].abs().max()) < 5


def test_sum_of_max_nice_ranks_like_sum_of_max_with_dead_units(dead_unit_backbone, dead_unit_states, mini_data):
    """Token-wise NICE must not wreck sum-of-max (SciFact test: 0.19 nDCG@10 against 0.69 without it)."""
    bm25 = BM25Retriever.build(mini_data.corpus, show_progress=False)
    scores = {}
    for transform in (None, "nice"):
        som = build_sum_of_max(mini_data.corpus, backbone_dir=dead_unit_backbone, states=dead_unit_states,
                               max_length=MAX_LENGTH, first_stage=bm25, transform=transform, fit_tokens=5_000)
        scores[transform] = evaluate(som.search(mini_data.queries, k=10), mini_data.qrels, ["nDCG@10"])["nDCG@10"]
    assert scores[None] > 0.7  # measured 0.740
    assert scores["nice"] > scores[None] - 0.1  # measured 0.742; 0.480 before the fix
