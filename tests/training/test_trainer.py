"""TrainingArgs selects the loss, binary-aware scoring and a density penalty; the default path is unchanged."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from uhdsearch.errors import UsageError
from uhdsearch.training.data import ict_pairs, pairs_from_qrels
from uhdsearch.training.losses import flops
from uhdsearch.training.negatives import teacher_negatives
from uhdsearch.recipes.teachers import CachedTeacher, DenseTeacher, rank_with_teacher
from uhdsearch.training.trainer import TrainingArgs, train


@pytest.fixture(scope="module")
def setup(mini_data):
    docs = list(mini_data.corpus.values())
    rows = {d.doc_id: i for i, d in enumerate(docs)}
    pairs = pairs_from_qrels(mini_data.queries, mini_data.qrels, rows)[:16] + ict_pairs(docs[:30], 1)
    rng = np.random.default_rng(0)
    # a fixed random dense teacher: its rankings are learnable targets for a 2,048-dim head
    teacher = DenseTeacher({p.query: rng.normal(size=16).astype(np.float32) for p in pairs},
                           rng.normal(size=(len(docs), 16)).astype(np.float32))
    ranked = rank_with_teacher(teacher, [p.query for p in pairs], docs, depth=20, show_progress=False)
    negatives = teacher_negatives(pairs, ranked, depth=20, skip=1)
    return docs, pairs, teacher, negatives


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k.startswith("buckets")}


def test_spelled_out_defaults_train_exactly_like_the_defaults(tiny_encoder, tiny_encoder_session, setup):
    import copy

    docs, pairs, _, _ = setup
    other = copy.deepcopy(tiny_encoder_session)
    base = dict(epochs=1, batch_size=8, learning_rate=3e-3)
    a = train(tiny_encoder, docs, pairs, TrainingArgs(**base), show_progress=False)
    b = train(other, docs, pairs, TrainingArgs(**base, loss="hinge", binary_aware=False, density_weight=0.0,
                                               tau=None), show_progress=False)
    assert a.losses == b.losses
    wa, wb = _weights(tiny_encoder), _weights(other)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("options", [
    dict(loss="infonce"),
    dict(loss="kl", teacher_temperature=1.0),
    dict(loss="margin_mse", teacher_scale=0.05),
    dict(loss="hinge", binary_aware=True),
    dict(loss="infonce", binary_aware=True, tau=0.5),
    dict(loss="kl", binary_aware=True, binary_estimator="relaxed", tau=0.5, tau_end=0.05, teacher_temperature=1.0),
], ids=["infonce", "kl", "margin_mse", "hinge-ste", "infonce-ste-tau", "kl-relaxed-annealed"])
def test_each_objective_trains_and_lowers_its_loss(tiny_encoder, setup, options):
    docs, pairs, teacher, negatives = setup
    before = _weights(tiny_encoder)
    args = TrainingArgs(epochs=5, batch_size=8, learning_rate=1e-2, warmup_ratio=0.0, **options)
    result = train(tiny_encoder, docs, pairs, args, hard_negatives=negatives, teacher=CachedTeacher(teacher),
                   show_progress=False)
    assert result.steps >= 16 and all(np.isfinite(result.losses))
    assert np.mean(result.losses[-5:]) < np.mean(result.losses[:5])
    after = _weights(tiny_encoder)
    assert any(not torch.equal(before[k], after[k]) for k in before if k.endswith("weight"))


def test_df_penalty_lowers_document_density(tiny_encoder, tiny_encoder_session, setup):
    # density="flops" does not: on this setup it raised this cost from 336 to 416 (WTA tokens move to rarer dims)
    import copy

    docs, pairs, _, _ = setup
    other = copy.deepcopy(tiny_encoder_session)
    states = tiny_encoder.token_states([d.full_text for d in docs], show_progress=False)
    base = dict(epochs=3, batch_size=8, learning_rate=1e-2, warmup_ratio=0.0, tau=0.5)
    train(tiny_encoder, docs, pairs, TrainingArgs(**base), document_states=states, show_progress=False)
    train(other, docs, pairs, TrainingArgs(**base, density_weight=10.0, density="df"), document_states=states,
          show_progress=False)

    def doc_frequency_cost(model) -> float:  # sum over dims of the squared share of documents hitting it
        with torch.no_grad():
            vectors = model.forward_states(states, list(range(len(docs))))
        return float(sum(flops((v > 0).float()) for v in vectors))

    assert doc_frequency_cost(other) < 0.9 * doc_frequency_cost(tiny_encoder)


def test_training_args_reject_bad_objectives():
    with pytest.raises(ValueError, match="loss='l2'; choose"):
        TrainingArgs(loss="l2")
    with pytest.raises(ValueError, match="need a tau"):
        TrainingArgs(binary_aware=True, binary_estimator="relaxed")
    with pytest.raises(ValueError, match="need a tau"):
        TrainingArgs(density_weight=1.0, density="df")
    with pytest.raises(ValueError, match="density_weight=-1"):
        TrainingArgs(density_weight=-1)
    with pytest.raises(ValueError, match="tau_end needs a starting tau"):
        TrainingArgs(tau_end=0.1)
    with pytest.raises(ValueError, match="binary_estimator='hard'"):
        TrainingArgs(binary_estimator="hard")


def test_train_rejects_objectives_without_their_inputs(tiny_encoder, setup):
    docs, pairs, teacher, _ = setup
    with pytest.raises(ValueError, match="loss='kl' needs a teacher"):
        train(tiny_encoder, docs, pairs, TrainingArgs(loss="kl"), show_progress=False)
    with pytest.raises(ValueError, match="needs hard_negatives"):
        train(tiny_encoder, docs, pairs, TrainingArgs(loss="margin_mse"), teacher=teacher, show_progress=False)
    states = tiny_encoder.token_states(["one query"], "query", show_progress=False)
    with pytest.raises(ValueError, match="query_states cover 1 texts"):
        train(tiny_encoder, docs, pairs, query_states=states, show_progress=False)


def test_document_tokens_trains_on_each_documents_first_tokens(tiny_encoder, tiny_encoder_session, setup):
    import copy

    from uhdsearch.encoder.states import compute_token_states

    docs, pairs, _, _ = setup
    states = compute_token_states(tiny_encoder.backbone, [d.full_text for d in docs], list(tiny_encoder.layers),
                                  tiny_encoder.config.document_max_length, show_progress=False)
    assert int(np.diff(states.offsets).max()) > 12  # the cut below removes tokens
    base = dict(epochs=1, batch_size=8, learning_rate=3e-3, loss="infonce")
    models = [copy.deepcopy(tiny_encoder_session) for _ in range(3)]
    cut = train(models[0], docs, pairs, TrainingArgs(**base, document_tokens=12), document_states=states,
                show_progress=False)
    by_hand = train(models[1], docs, pairs, TrainingArgs(**base), document_states=states.truncated(12),
                    show_progress=False)
    whole = train(models[2], docs, pairs, TrainingArgs(**base), document_states=states, show_progress=False)
    assert cut.losses == by_hand.losses != whole.losses
    with pytest.raises(UsageError, match="document_tokens"):
        TrainingArgs(document_tokens=0)
    with pytest.raises(UsageError, match="document_tokens"):
        train(models[0], docs, pairs, TrainingArgs(**base, document_tokens=12, train_backbone_layers=-1),
              show_progress=False)


def test_a_time_budget_that_runs_out_is_said_and_recorded(tiny_encoder, setup, capsys):
    docs, pairs, _, _ = setup
    full = train(tiny_encoder, docs, pairs, TrainingArgs(epochs=1, batch_size=8), show_progress=False)
    assert (full.steps, full.out_of_time) == (full.planned_steps, False) and full.planned_steps > 1
    assert "budget" not in capsys.readouterr().err
    cut = train(tiny_encoder, docs, pairs, TrainingArgs(epochs=1, batch_size=8, max_minutes=1e-9), show_progress=False)
    assert (cut.steps, cut.planned_steps, cut.out_of_time) == (1, full.planned_steps, True)
    assert f"training stopped at step 1 of {full.planned_steps}: its 1e-09-minute budget" in capsys.readouterr().err
    last = train(tiny_encoder, docs, pairs, TrainingArgs(epochs=1, batch_size=8, max_steps=1, max_minutes=1e-9),
                 show_progress=False)  # the budget ends at the last planned step: nothing was cut
    assert (last.steps, last.planned_steps, last.out_of_time) == (1, 1, False)
    assert "budget" not in capsys.readouterr().err
