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


@pytest.mark.slow
def test_uhd_analyses_tables_agree(tiny_model_and_index, scifact_mini_dir: Path, tmp_path: Path) -> None:
    model, index = tiny_model_and_index
    options = {"data": str(scifact_mini_dir), "model": str(model), "index": str(index),
               "query_ks": [2, 5, None], "stop_fractions": [None, 0.3, 0.05], "interpret_documents": 10,
               "sampled_dims": 3, "bucket_models": {"a": [str(model), str(index)], "b": [str(model), str(index)]}}
    run_study("uhd-analyses", options, tmp_path / "reports", tmp_path / "cache", command="test")
    result = json.loads((tmp_path / "reports" / "uhd-analyses" / "result.json").read_text())
    t = result["tables"]
    query_k = {r["query_k"]: r for r in t["query_k (Table 4)"]}
    real = next(r for r in t["binarized vs real-valued (§4.5)"] if r["query"] == r["document"] == "real")
    assert query_k[None]["nDCG@10 weighted"] == pytest.approx(real["nDCG@10"])
    assert query_k[2]["mean_query_dims"] <= 2 < query_k[None]["mean_query_dims"]
    stop = t["stop dimensions: quality and postings touched vs df threshold"]
    assert stop[0]["stop_dims"] == 0 and stop[0]["nDCG@10 weighted"] == pytest.approx(real["nDCG@10"])
    touched = [r["postings_touched_per_query"] for r in stop]
    assert touched[0] >= touched[1] >= touched[2]
    buckets = {r["strategy"]: r["nDCG@10"] for r in t["bucket strategies (Tables 5-6)"]}
    assert buckets["a"] == buckets["b"] == buckets["per-query oracle"] == pytest.approx(real["nDCG@10"])
    assert len(t["interpretability: tokens that most activate sampled dims (Table 7)"]) == 3
    for name in result["figures"].values():
        assert (tmp_path / "reports" / "uhd-analyses" / name).stat().st_size > 1000
