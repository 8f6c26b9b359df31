"""The UHD analyses on a tiny one-bucket model and its weighted index over scifact-mini: tables that must agree
with each other (the query_k=None row is plain weighted scoring; a stricter stop threshold touches fewer
postings), figures written, and the bucket-strategy hook's per-query oracle at least as good as each model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from uhdsearch.studies.registry import run_study


@pytest.fixture(scope="module")
def tiny_model_and_index(tmp_path_factory, tiny_backbone_dir, scifact_mini_dir):
    from uhdsearch.encoder.config import EncoderConfig
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import load_beir
    from uhdsearch.index.inverted import WeightedIndex

    root = tmp_path_factory.mktemp("uhd")
    config = EncoderConfig(dim=2048, wta_k=16, query_k=None, bucket_layers=(-1,), document_max_length=64,
                           query_max_length=16, wta_dtype="float32")
    model = UHDEncoder.new(tiny_backbone_dir, config).eval()
    model.save_pretrained(root / "model")
    data = load_beir(scifact_mini_dir, "test")
    docs = list(data.corpus.values())
    encoded = model.encode_document([d.full_text for d in docs], show_progress=False)
    WeightedIndex.from_encoding(encoded, [d.doc_id for d in docs], None, model.digest()).save(root / "index")
    return root / "model", root / "index"


@pytest.fixture(scope="module")
def two_buckets_and_the_second_alone(tmp_path_factory, tiny_backbone_dir, scifact_mini_dir):
    """A two-bucket model weighted (0, 1), and a one-bucket model holding its second bucket; each with its index."""
    from uhdsearch.encoder.config import EncoderConfig
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import load_beir
    from uhdsearch.index.inverted import WeightedIndex

    root = tmp_path_factory.mktemp("two")
    config = EncoderConfig(dim=2048, wta_k=16, query_k=None, bucket_layers=(1, 2), bucket_weights=(0.0, 1.0),
                           document_max_length=64, query_max_length=16, wta_dtype="float32")
    two = UHDEncoder.new(tiny_backbone_dir, config).eval()
    alone = UHDEncoder(two.backbone, config.replace(bucket_layers=(2,), bucket_weights=None)).eval()
    alone.buckets.wta["2"].load_state_dict(two.buckets.wta["2"].state_dict())
    docs = list(load_beir(scifact_mini_dir, "test").corpus.values())
    out = {}
    for name, model in (("two", two), ("alone", alone)):
        model.save_pretrained(root / name)
        encoded = model.encode_document([d.full_text for d in docs], show_progress=False)
        WeightedIndex.from_encoding(encoded, [d.doc_id for d in docs], None, model.digest()).save(root / f"{name}-index")
        out[name] = [str(root / name), str(root / f"{name}-index")]
    return out


@pytest.mark.slow
def test_uhd_analyses_tables_agree(tiny_model_and_index, two_buckets_and_the_second_alone, scifact_mini_dir: Path,
                                   tmp_path: Path) -> None:
    model, index = tiny_model_and_index
    options = {"data": str(scifact_mini_dir), "model": str(model), "index": str(index),
               "query_ks": [2, 5, None], "stop_fractions": [None, 0.3, 0.05], "interpret_documents": 10,
               "sampled_dims": 3, "bucket_models": {"a": [str(model), str(index)], "b": [str(model), str(index)],
                                                    **two_buckets_and_the_second_alone}}
    run_study("uhd-analyses", options, tmp_path / "reports", tmp_path / "cache", command="test")
    out = tmp_path / "reports" / "uhd-analyses" / "scifact-mini"  # a collection other than SciFact: its own folder
    result = json.loads((out / "result.json").read_text())
    t = result["tables"]
    query_k = {r["query_k"]: r for r in t["query_k (Table 4)"]}
    real = next(r for r in t["binarized vs real-valued (§4.5)"] if r["query"] == r["document"] == "real")
    assert query_k[None]["nDCG@10 weighted"] == pytest.approx(real["nDCG@10"])
    assert query_k[2]["mean_query_dims"] <= 2 < query_k[None]["mean_query_dims"]
    stop = t["stop dimensions: quality and postings touched vs df threshold"]
    assert stop[0]["stop_dims"] == 0 and stop[0]["nDCG@10 weighted"] == pytest.approx(real["nDCG@10"])
    touched = [r["postings_touched_per_query"] for r in stop]
    assert touched[0] >= touched[1] >= touched[2]
    rows = {r["strategy"]: r for r in t["bucket strategies (Tables 5-6)"]}
    assert rows["a"]["nDCG@10"] == rows["b"]["nDCG@10"] == pytest.approx(real["nDCG@10"])
    assert rows["per-query oracle"]["nDCG@10"] >= max(r["nDCG@10"] for r in rows.values())
    # every bucket counts at the model's weights: (0, 1) ranks as the second bucket alone
    assert rows["two"]["buckets"] == 2 and rows["alone"]["buckets"] == 1
    for measure in ("nDCG@10", "nDCG@10 binary"):
        assert rows["two"][measure] == pytest.approx(rows["alone"][measure])
    assert len(t["interpretability: tokens that most activate sampled dims (Table 7)"]) == 3
    for name in result["figures"].values():
        assert (out / name).stat().st_size > 1000
