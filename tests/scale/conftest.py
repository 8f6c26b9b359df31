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
