"""Queries and documents encoded in several threads at once keep their own truncation (one tokenizer shared)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from uhdsearch.encoder.backbone import tokenize_texts

TEXT = " ".join(["microbiota obesity diabetes"] * 20)  # 102 tokens
MIDDLE = " ".join(["bone density in older women"] * 8)  # 42 tokens: over a query's 16, under a document's 64


def test_threads_with_different_max_lengths_each_get_their_own(tiny_encoder_session):
    model = tiny_encoder_session  # queries cut at 16 tokens, documents at 64
    tokenizer = model.backbone.tokenizer

    def job(i: int) -> tuple[int, int]:
        limit = (16, 64, 24)[i % 3]
        if i % 3 == 2:
            return limit, int(model.backbone.tokenize([TEXT], limit)["input_ids"].shape[1])
        return limit, len(tokenize_texts(tokenizer, [TEXT], truncation=True, max_length=limit)["input_ids"][0])

    with ThreadPoolExecutor(8) as pool:
        lengths = list(pool.map(job, range(6000)))
    assert [n for limit, n in lengths if n != limit] == []


def test_queries_and_documents_encoded_side_by_side_are_flagged_as_alone(tiny_encoder_session):
    model = tiny_encoder_session

    def job(i: int) -> bool:
        return bool(model.encode([MIDDLE], "query" if i % 2 else "document").truncated[0])

    with ThreadPoolExecutor(4) as pool:
        flags = list(pool.map(job, range(600)))
    assert flags == [bool(i % 2) for i in range(600)]
