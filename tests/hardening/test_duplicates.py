"""Duplicate query ids (issue 17, class 4): an error by default that names the opt-out; with on_duplicate="first"
or "last" (CLI --duplicate-queries keep-first|keep-last) one occurrence survives and one warning gives the count."""
from __future__ import annotations

import logging

import pytest

from tests.hardening.hardening_helpers import call, error_line
from uhdsearch.errors import DataFormatError, UsageError
from uhdsearch.evaluation.datasets import load_queries
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.search.searcher import Searcher
from uhdsearch.types import Query, as_queries

QUERIES = [Query("q1", "vitamin d"), Query("q2", "bone"), Query("q1", "fracture risk"), Query("q3", "x"),
           Query("q1", "heart")]
LINES = "".join(f'{{"_id": "{q.query_id}", "text": "{q.text}"}}\n' for q in QUERIES)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize(("mode", "expected"), [
    ("first", [("q1", "vitamin d"), ("q2", "bone"), ("q3", "x")]),
    ("last", [("q2", "bone"), ("q3", "x"), ("q1", "heart")]),
])
def test_as_queries_keeps_one_occurrence_where_it_stands(caplog, mode, expected):
    with caplog.at_level(logging.WARNING):
        kept = as_queries(QUERIES, on_duplicate=mode)
    assert [(q.query_id, q.text) for q in kept] == expected
    assert _warnings(caplog) == [f"the queries given: dropped 2 duplicate queries (ids given more than once: "
                                 f"1); kept the {mode} occurrence of each (on_duplicate={mode!r})"]


def test_as_queries_default_is_the_error_naming_the_option(caplog):
    with pytest.raises(UsageError, match=r"query_id 'q1' appears twice \(items 0 and 2\); query ids must be unique, "
                                         r"or pass on_duplicate='first' or 'last' .*--duplicate-queries keep-first"):
        as_queries(QUERIES)
    with pytest.raises(UsageError, match=r"on_duplicate='keep'; choose one of 'error', 'first', 'last'"):
        as_queries(QUERIES[:2], on_duplicate="keep")
    with caplog.at_level(logging.WARNING):
        assert as_queries(QUERIES[:2], on_duplicate="last") == QUERIES[:2]  # no duplicates: as given, no warning
    assert _warnings(caplog) == []


@pytest.mark.parametrize(("mode", "expected"), [
    ("first", {"q1": "vitamin d", "q2": "bone", "q3": "x"}),
    ("last", {"q2": "bone", "q3": "x", "q1": "heart"}),
])
def test_load_queries_opt_out_names_the_file_and_count(tmp_path, caplog, mode, expected):
    path = tmp_path / "queries.jsonl"
    path.write_text(LINES)
    with caplog.at_level(logging.WARNING):
        loaded = load_queries(path, on_duplicate=mode)
    assert {k: q.text for k, q in loaded.items()} == expected
    assert list(loaded) == list(expected)  # file order of the kept lines
    assert _warnings(caplog) == [f"{path}: dropped 2 duplicate queries (ids given more than once: 1); kept "
                                 f"the {mode} occurrence of each (on_duplicate={mode!r})"]
    with pytest.raises(DataFormatError, match=r"queries\.jsonl:3: duplicate query_id 'q1' \(first on line 1\); "
                                              r"query ids must be unique, or pass on_duplicate="):
        load_queries(path)


def test_kept_query_searches_like_its_text_alone(tiny_encoder_session, index_dir):
    searcher = Searcher(tiny_encoder_session, InvertedIndex.load(index_dir))
    for mode, text in (("first", "vitamin d"), ("last", "heart")):
        run = searcher.search(as_queries(QUERIES, on_duplicate=mode), k=5)
        alone = searcher.search([Query("q1", text)], k=5)
        assert run["q1"] == alone["q1"] and len(run) == 3


@pytest.mark.parametrize(("option", "text"), [("keep-first", "vitamin d"), ("keep-last", "heart")])
def test_cli_duplicate_queries_option(tmp_path, caplog, model_dir, index_dir, option, text):
    path = tmp_path / "queries.jsonl"
    path.write_text(LINES)
    base = ["search", "--model", str(model_dir), "--index", str(index_dir), "--k", "5"]
    with caplog.at_level(logging.WARNING):  # the CLI logs to stderr; under pytest the records come here
        code, out, _ = call(base + ["--queries", str(path), "--duplicate-queries", option])
    assert code == 0
    assert f"{path}: dropped 2 duplicate queries (ids given more than once: 1)" in _warnings(caplog)[0]
    lines = out.splitlines()
    assert sorted({line.split()[0] for line in lines}) == ["q1", "q2", "q3"]
    code, alone, _ = call(base + ["--query", text])
    assert code == 0 and [line for line in lines if line.startswith("q1 ")] == alone.splitlines()


def test_cli_refuses_an_unknown_duplicate_mode(tmp_path, model_dir, index_dir):
    path = tmp_path / "queries.jsonl"
    path.write_text(LINES)
    code, out, err = call(["search", "--model", str(model_dir), "--index", str(index_dir), "--queries", str(path),
                           "--duplicate-queries", "first"])
    assert code == 2 and out == ""
    assert error_line(err) == "error: --duplicate-queries 'first'; choose error, keep-first or keep-last"
