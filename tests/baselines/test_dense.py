import pytest
import torch

from uhdsearch.baselines.dense import DenseRetriever
from uhdsearch.encoder.backbone import Backbone


@pytest.fixture(scope="module")
def dense(tiny_backbone_dir, mini_data):
    return DenseRetriever.build(mini_data.corpus, backbone=tiny_backbone_dir, max_length=64, show_progress=False)


def test_scores_are_cosines_of_mean_pooled_states(dense, tiny_backbone_dir, mini_data):
    backbone = Backbone.from_pretrained(tiny_backbone_dir).eval()
    docs = list(mini_data.corpus.values())[:5]
    query = mini_data.queries[0]

    def embed(text):
        batch = backbone.tokenize([text], 64)
        with torch.no_grad():
            states = backbone.model(**batch).last_hidden_state[0]
        return torch.nn.functional.normalize(states.mean(dim=0), dim=0).numpy()

    expected = {d.doc_id: float(embed(query.text) @ embed(d.full_text)) for d in docs}
    got = {h.doc_id: h.score for h in dense.search([query], k=len(mini_data.corpus))[query.query_id]}
    for doc_id, score in expected.items():
        assert got[doc_id] == pytest.approx(score, abs=2e-2)  # cached states are bfloat16


def test_empty_corpus_and_bad_k(dense, tiny_backbone_dir):
    with pytest.raises(ValueError, match="the corpus is empty"):
        DenseRetriever.build([], backbone=tiny_backbone_dir)
    for bad in (0, -2, True):
        with pytest.raises(ValueError, match="must be a positive integer"):
            dense.search({"q": "x"}, k=bad)
