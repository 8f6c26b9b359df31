"""The speed tests reuse the index tests' oracle helpers and their thread split of tiny indexes."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "index"))


@pytest.fixture(autouse=True, scope="module")
def split_tiny_indexes_between_threads():
    from uhdsearch.index.kernels import dispatch

    saved = dispatch.MIN_DOCUMENTS_PER_THREAD
    dispatch.MIN_DOCUMENTS_PER_THREAD = 1
    yield
    dispatch.MIN_DOCUMENTS_PER_THREAD = saved


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
