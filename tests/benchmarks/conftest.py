"""Fixtures of the benchmark modules' tests (benchmarks/ is a package: `benchmarks.lib.synthetic`)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny_query_model(tiny_backbone_dir):
    """A one-bucket model on the tiny backbone whose query side keeps every winner (what the query experiments need)."""
    from uhdsearch.encoder.config import EncoderConfig
    from uhdsearch.encoder.model import UHDEncoder

    config = EncoderConfig(dim=512, wta_k=8, query_k=None, bucket_layers=(-1,), query_max_length=16,
                           wta_dtype="float32")
    return UHDEncoder.new(tiny_backbone_dir, config).eval()
