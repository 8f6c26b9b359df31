"""`uhdsearch search --max-df --idf`: the same run as the Searcher with those options; bad values exit 2."""
from __future__ import annotations


import pytest

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.evaluation.datasets import load_corpus
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.search.searcher import Searcher
from uhdsearch.types import format_run


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_backbone_dir, scifact_mini_dir):
    root = tmp_path_factory.mktemp("cli")
    model = UHDEncoder.new(tiny_backbone_dir, EncoderConfig(dim=2048, wta_k=16, query_k=None))
    model.save_pretrained(root / "model")
    corpus = dict(list(load_corpus(scifact_mini_dir / "corpus.jsonl").items())[:120])
    index = BinaryIndex.build(model, corpus, root / "index", show_progress=False)
    return root, model, index


def test_search_max_df_idf_matches_the_searcher(built, cli):
    root, model, index = built
    text = "vitamin D deficiency and bone fractures"
    code, out, err = cli(["search", "--model", str(root / "model"), "--index", str(root / "index"),
                         "--query", text, "--k", "8", "--max-df", "0.2", "--idf"])
    assert code == 0, err
    want = format_run(Searcher(model, index, max_df=0.2, idf=True).search({"q1": text}, k=8))
    assert out == want and out
    plain = format_run(Searcher(model, index).search({"q1": text}, k=8))
    assert out != plain  # the options change the ranking or at least its scores


@pytest.mark.parametrize("bad", ["0", "1.5", "-0.2"])
def test_bad_max_df_exits_2(built, bad, cli):
    root, _, _ = built
    code, out, err = cli(["search", "--model", str(root / "model"), "--index", str(root / "index"),
                         "--query", "x", "--max-df", bad])
    assert code == 2 and out == "" and "--max-df" in err
