"""Fixtures of the hardening tests: a saved tiny model, a built index, a small disk."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, tiny_encoder_session) -> Path:
    path = tmp_path_factory.mktemp("hardening") / "model"
    tiny_encoder_session.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory, mini_encoding, mini_data, tiny_encoder_session) -> Path:
    from uhdsearch.index.inverted import BinaryIndex

    path = tmp_path_factory.mktemp("hardening") / "index"
    BinaryIndex.from_encoding(mini_encoding, list(mini_data.corpus), path, tiny_encoder_session.digest())
    return path


def _tmpfs(path: Path, size: str):
    path.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a tmpfs")
    yield path
    subprocess.run(["umount", str(path)], check=True)


@pytest.fixture
def small_mount(tmp_path):
    """A 96 KiB tmpfs (root only; skipped elsewhere): a disk that fills."""
    yield from _tmpfs(tmp_path / "mnt", "96k")


@pytest.fixture
def roomy_mount(tmp_path):
    """A 16 MiB tmpfs (root only; skipped elsewhere) that a test can remount read-only."""
    yield from _tmpfs(tmp_path / "mnt", "16m")
