"""A tiny model with a static and a segmented index of scifact-mini, saved once per session."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def served(tmp_path_factory, tiny_encoder_session, mini_data, mini_encoding):
    """(root, model_dir, static index_dir, corpus.jsonl) on disk, as `uhdsearch serve` is given them."""
    import json

    from uhdsearch.index.inverted import WeightedIndex

    root = tmp_path_factory.mktemp("served")
    tiny_encoder_session.save_pretrained(root / "model")
    WeightedIndex.from_encoding(mini_encoding, list(mini_data.corpus), root / "index", tiny_encoder_session.digest())
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as f:
        for d in mini_data.corpus.values():
            f.write(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.text}) + "\n")
    return root


@pytest.fixture(scope="session")
def served_encoder(served):
    from uhdsearch.encoder.model import UHDEncoder

    return UHDEncoder.from_pretrained(served / "model")


@pytest.fixture
def segmented(tmp_path, served, mini_data, mini_encoding, tiny_encoder_session):
    """A segmented index of the first 300 documents (one commit); the other 100 are left to add."""
    from uhdsearch.index.live.segments import SegmentedIndex

    ids = list(mini_data.corpus)[:300]
    with SegmentedIndex.create(tmp_path / "live", "weighted", dim=mini_encoding.dim,
                               n_buckets=mini_encoding.n_buckets,
                               encoder_digest=tiny_encoder_session.digest()) as index:
        index.add(mini_encoding[:300], ids)
        index.commit()
    return tmp_path / "live"


@pytest.fixture
def live(segmented, served_encoder, mini_data):
    """A TestClient of the service over `segmented` with the texts of its documents; the write key is s3cret."""
    from fastapi.testclient import TestClient

    from uhdsearch.serving.app import create_app
    from uhdsearch.serving.service import SearchService
    from uhdsearch.serving.settings import ServeSettings

    corpus = {d: mini_data.corpus[d] for d in list(mini_data.corpus)[:300]}
    app = create_app(SearchService.open(served_encoder, segmented, corpus), ServeSettings(api_key="s3cret"))
    with TestClient(app, base_url="http://localhost") as client:
        assert app.state.ready.wait(120)
        yield client
