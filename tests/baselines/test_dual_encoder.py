"""DE-k: training lowers the loss, scores equal the head applied to fresh backbone states, conformance, errors."""
import numpy as np
import pytest
import torch

from uhdsearch.baselines.dense import DenseRetriever
from uhdsearch.experiments.builders import build_dense, training_pairs
from uhdsearch.baselines.dual_encoder import (
    DualEncoderArgs, DualEncoderHead, build_dual_encoder, train_dual_encoder,
)
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.experiments import SYSTEMS as BUILDERS, build_system

MAX_LENGTH = 64


@pytest.fixture(scope="module")
def train_data(scifact_mini_dir):
    return load_beir(scifact_mini_dir, "train")


@pytest.fixture(scope="module")
def trained(backbone, documents, states, train_data):
    head = DualEncoderHead(backbone.hidden_size, 32, "mean")
    pairs = training_pairs(documents, train_data.queries, train_data.qrels, ict_per_document=1)
    result = train_dual_encoder(head, backbone, documents, pairs, DualEncoderArgs(epochs=2), states, MAX_LENGTH,
                                show_progress=False)
    return head, result


def test_training_lowers_the_loss(trained):
    _, result = trained
    assert result.steps >= 10
    assert np.mean(result.losses[-5:]) < np.mean(result.losses[:5]) - 0.2


def test_scores_are_head_outputs_of_fresh_backbone_states(trained, backbone, documents, states, mini_data):
    head, _ = trained
    de = build_dual_encoder(documents, backbone, head, states, MAX_LENGTH, "de-32")
    query = mini_data.queries[0]

    def embed(text):
        batch = backbone.tokenize([text], MAX_LENGTH)
        with torch.no_grad():
            tokens = backbone.model(**batch).last_hidden_state[0]
            return head.project(tokens.mean(dim=0, keepdim=True))[0].numpy()

    got = {h.doc_id: h.score for h in de.search([query], k=len(documents))[query.query_id]}
    for d in documents[:5]:
        assert got[d.doc_id] == pytest.approx(float(embed(query.text) @ embed(d.full_text)), abs=2e-2)  # bf16 cache
    assert de.entries.shape == (len(documents), 32)
    assert np.allclose(np.linalg.norm(de.entries, axis=1), 1.0, atol=1e-5)


def test_dense_builder_matches_dense_retriever(backbone, documents, states, mini_data):
    ours = build_dense(mini_data.corpus, backbone_dir=backbone, states=states, max_length=MAX_LENGTH)
    theirs = DenseRetriever.build(mini_data.corpus, backbone=backbone, states=states, max_length=MAX_LENGTH,
                                  show_progress=False)
    queries = mini_data.queries[:5]
    a, b = ours.search(queries, k=20), theirs.search(queries, k=20)
    for q in queries:
        assert [h.score for h in a[q.query_id]] == pytest.approx([h.score for h in b[q.query_id]], abs=1e-5)


@pytest.mark.parametrize("k", [1, 7, 1000])
def test_conformance(trained, backbone, documents, states, mini_data, k):
    de = build_dual_encoder(documents, backbone, trained[0], states, MAX_LENGTH, "de-32")
    queries = mini_data.queries[:6]
    run = de.search(queries, k=k)
    assert list(run) == [q.query_id for q in queries]
    for q in queries:
        hits = run[q.query_id]
        assert len(hits) == min(k, len(documents))
        ids = [h.doc_id for h in hits]
        assert len(set(ids)) == len(ids)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(de.search([], k=k)) == 0
    assert de.search({"blank": "   "}, k=k)["blank"] == []


def test_top_layer_unfreezing_changes_the_backbone(tiny_backbone_dir, documents, train_data):
    backbone = Backbone.from_pretrained(tiny_backbone_dir)
    before = [p.detach().clone() for p in backbone._layer_modules()[-1].parameters()]
    frozen = [p.detach().clone() for p in backbone._layer_modules()[0].parameters()]
    head = DualEncoderHead(backbone.hidden_size, 16, "cls")
    pairs = training_pairs(documents, train_data.queries, train_data.qrels, ict_per_document=0)
    args = DualEncoderArgs(train_backbone_layers=1, max_steps=2, batch_size=4, n_sampled_negatives=2)
    result = train_dual_encoder(head, backbone, documents, pairs, args, None, 32, show_progress=False)
    assert result.steps == 2
    after = list(backbone._layer_modules()[-1].parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after))
    assert all(torch.equal(a, b) for a, b in zip(frozen, backbone._layer_modules()[0].parameters()))


def test_bad_input(backbone, documents, trained, states):
    with pytest.raises(ValueError, match="dim=0 must be positive"):
        DualEncoderHead(8, 0)
    with pytest.raises(ValueError, match="pooling='max'"):
        DualEncoderHead(8, 4, "max")
    with pytest.raises(ValueError, match="batch_size=1 must be at least 2"):
        DualEncoderArgs(batch_size=1)
    with pytest.raises(ValueError, match="no training pairs"):
        train_dual_encoder(DualEncoderHead(8, 4), backbone, documents, [])
    with pytest.raises(ValueError, match="the corpus is empty"):
        build_dual_encoder([], backbone, trained[0])
    with pytest.raises(ValueError, match="states cover 400 texts but the corpus has 3"):
        build_dual_encoder(documents[:3], backbone, trained[0], states)
    de = build_dual_encoder(documents, backbone, trained[0], states, MAX_LENGTH)
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="must be a positive integer"):
            de.search({"q": "x"}, k=bad)
    with pytest.raises(ValueError, match="unknown system 'de-7'; known: dense, de-32"):
        build_system("de-7", documents)


def test_registry_names_every_system():
    expected = {"dense", "de-32", "de-64", "de-128", "de-256", "me-1", "me-4", "me-8", "sum-of-max",
                "dense+whiten-seq", "dense+whiten-tok", "dense+nice", "dense+glow", "uhd-binary+whiten"}
    assert expected <= set(BUILDERS)
