"""Fixtures for the scale tests: a saved tiny model, one local Ray cluster (2 CPUs) for the whole session."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_encoder_session):
    path = tmp_path_factory.mktemp("scale") / "model"
    tiny_encoder_session.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster with 2 CPUs, so that 2 actors run side by side; shut down after the session."""
    ray = pytest.importorskip("ray")
    from uhdsearch.scale.cluster import connect

    connect(None, num_cpus=2)
    yield ray
    ray.shutdown()


@pytest.fixture
def segmented_index(tmp_path, tiny_encoder_session, mini_encoding, mini_data):
    """scifact-mini in 3 committed segments with 25 documents deleted across them (375 live)."""
    from uhdsearch.index.live.segments import SegmentedIndex

    ids = list(mini_data.corpus)
    index = SegmentedIndex.create(tmp_path / "segmented", "weighted", tiny_encoder_session.config.dim,
                                  mini_encoding.n_buckets, tiny_encoder_session.digest())
    for start, stop in ((0, 150), (150, 300), (300, 400)):
        index.add(mini_encoding[start:stop], ids[start:stop])
        index.commit()
    assert index.delete(ids[::16]) == 25
    index.commit()
    index.close()
    return tmp_path / "segmented"
