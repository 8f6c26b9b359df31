from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from uhdsearch.errors import DataFormatError
from uhdsearch.evaluation.datasets import (
    bundled_dataset_dir,
    iter_jsonl,
    load_beir,
    load_corpus,
    load_qrels,
    load_queries,
)
from uhdsearch.types import Document, Query


def write_beir(
    root: Path,
    corpus: str = '{"_id": "d1", "title": "T1", "text": "one"}\n{"_id": "d2", "text": "two"}\n',
    queries: str = '{"_id": "q1", "text": "first"}\n{"_id": "q2", "text": "second"}\n',
    qrels: dict[str, str] | None = None,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text(corpus, encoding="utf-8")
    (root / "queries.jsonl").write_text(queries, encoding="utf-8")
    (root / "qrels").mkdir(exist_ok=True)
    if qrels is None:
        qrels = {"test": "query-id\tcorpus-id\tscore\nq2\td1\t1\n"}
    for split, text in qrels.items():
        (root / "qrels" / f"{split}.tsv").write_text(text, encoding="utf-8")
    return root


# --- scifact-mini -------------------------------------------------------------------------------


def test_scifact_mini_test_split(scifact_mini_dir: Path) -> None:
    data = load_beir(scifact_mini_dir, split="test")
    assert data.name == "scifact-mini"
    assert data.split == "test"
    assert len(data.corpus) == 400
    assert len(data.queries) == 40
    assert sum(len(v) for v in data.qrels.values()) == 50
    assert [q.query_id for q in data.queries] == list(data.qrels)  # both in file order, same set
    assert data.queries[0] == Query("1", "0-dimensional biomaterials show inductive properties.")
    # Corpus keeps corpus.jsonl order.
    file_ids = [json.loads(line)["_id"] for line in (scifact_mini_dir / "corpus.jsonl").read_text().splitlines()]
    assert list(data.corpus) == file_ids
    first = data.corpus["4983"]
    assert first.title.startswith("Microstructural development of human newborn cerebral white matter")
    assert first.text.startswith("Alterations of the architecture of cerebral white matter")
    # Every judged document is in the corpus.
    assert all(d in data.corpus for judged in data.qrels.values() for d in judged)


def test_scifact_mini_train_split_has_other_queries(scifact_mini_dir: Path) -> None:
    train = load_beir(scifact_mini_dir, split="train")
    test = load_beir(scifact_mini_dir, split="test")
    assert len(train.queries) == 40
    assert sum(len(v) for v in train.qrels.values()) == 45
    assert train.queries[0].query_id == "0"
    assert not {q.query_id for q in train.queries} & {q.query_id for q in test.queries}


def test_bundled_scifact_counts_match_beir() -> None:
    data = load_beir(bundled_dataset_dir(), split="test")
    assert data.name == "scifact"
    assert (len(data.corpus), len(data.queries), sum(len(v) for v in data.qrels.values())) == (5183, 300, 339)


def test_bundled_dataset_dir_unknown_name() -> None:
    with pytest.raises(FileNotFoundError, match=r"no bundled dataset 'msmarco'.*bundled: scifact"):
        bundled_dataset_dir("msmarco")


# --- successful edge cases ------------------------------------------------------------------------


def test_only_queries_judged_in_split_in_file_order(tmp_path: Path) -> None:
    root = write_beir(
        tmp_path / "col",
        queries='{"_id": "q1", "text": "a"}\n{"_id": "q2", "text": "b"}\n{"_id": "q3", "text": "c"}\n',
        qrels={
            "test": "query-id\tcorpus-id\tscore\nq3\td1\t1\nq1\td2\t1\n",
            "train": "query-id\tcorpus-id\tscore\nq2\td1\t1\n",
        },
    )
    data = load_beir(root)
    assert [q.query_id for q in data.queries] == ["q1", "q3"]
    assert data.qrels == {"q3": {"d1": 1}, "q1": {"d2": 1}}
    assert data.corpus["d1"] == Document("d1", "one", "T1")
    assert data.corpus["d2"] == Document("d2", "two", "")


def test_integer_ids_become_strings_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    root = write_beir(
        tmp_path / "col",
        corpus='\n{"_id": 7, "text": "seven", "title": null}\n\n',
        queries='{"_id": 3, "text": "three"}\n   \n',
        qrels={"test": "query-id\tcorpus-id\tscore\n\n3\t7\t2\n"},
    )
    data = load_beir(root)
    assert data.corpus == {"7": Document("7", "seven", "")}
    assert data.queries == [Query("3", "three")]
    assert data.qrels == {"3": {"7": 2}}


def test_qrels_trec_format_and_non_positive_scores_kept(tmp_path: Path) -> None:
    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 d1 1\nq1 0 d2 0\nq2 Q0 d3 -1\n", encoding="utf-8")
    assert load_qrels(path) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": -1}}


def test_qrels_beir_without_header(tmp_path: Path) -> None:
    path = tmp_path / "qrels.tsv"
    path.write_text("q1\td1\t1\nq2\td2\t0\n", encoding="utf-8")
    assert load_qrels(path) == {"q1": {"d1": 1}, "q2": {"d2": 0}}


def test_iter_jsonl_yields_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n{"b": 2}\n', encoding="utf-8")
    assert list(iter_jsonl(path)) == [(1, {"a": 1}), (3, {"b": 2})]


# --- errors -------------------------------------------------------------------------------------


def test_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        load_beir(missing)


def test_missing_corpus_file(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "col")
    (root / "corpus.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(str(root / "corpus.jsonl"))):
        load_beir(root)


def test_missing_split_lists_available(tmp_path: Path) -> None:
    root = write_beir(
        tmp_path / "col",
        qrels={"test": "query-id\tcorpus-id\tscore\nq1\td1\t1\n", "train": "query-id\tcorpus-id\tscore\nq1\td1\t1\n"},
    )
    with pytest.raises(
        FileNotFoundError, match=re.escape(f"no qrels for split 'dev' in {root / 'qrels'}; available: test, train")
    ):
        load_beir(root, split="dev")


def test_missing_qrels_directory(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "col")
    for f in (root / "qrels").iterdir():
        f.unlink()
    (root / "qrels").rmdir()
    with pytest.raises(FileNotFoundError, match=r"no qrels for split 'test' .*available: none"):
        load_beir(root)


@pytest.mark.parametrize(
    ("corpus", "message"),
    [
        ('{"_id": "d1", "text": "ok"}\n{"_id": "d2", "text": \n', r"corpus\.jsonl:2: malformed JSON"),
        ('{"_id": "d1", "text": "ok"}\n\n["d2", "text"]\n', r"corpus\.jsonl:3: expected a JSON object, got list"),
        ('{"id": "d1", "contents": "x"}\n', r"corpus\.jsonl:1: missing '_id' \(found keys: contents, id\)"),
        ('{"_id": "d1", "text": 5}\n', r"corpus\.jsonl:1: 'text' must be a string, got int"),
        ('{"_id": "d1", "text": "x", "title": ["a"]}\n', r"corpus\.jsonl:1: 'title' must be a string, got list"),
        ('{"_id": "d1"}\n', r"corpus\.jsonl:1: missing 'text'"),
        ('{"_id": 1.5, "text": "x"}\n', r"corpus\.jsonl:1: '_id' must be a string, got float"),
        (
            '{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": "b"}\n{"_id": "d1", "text": "c"}\n',
            r"corpus\.jsonl:3: duplicate doc_id 'd1' \(first on line 1\)",
        ),
        ("\n\n", r"corpus\.jsonl has no documents"),
    ],
)
def test_corpus_errors(tmp_path: Path, corpus: str, message: str) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text(corpus, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        load_corpus(path)


def test_corpus_error_names_full_path(tmp_path: Path) -> None:
    corpus = '{"_id": "d1", "text": "a"}\n{"_id": 2, "text": "b"}\n{"_id": "2", "text": "c"}\n'
    root = write_beir(tmp_path / "col", corpus=corpus)
    message = f"{root / 'corpus.jsonl'}:3: duplicate doc_id '2' (first on line 2)"
    with pytest.raises(DataFormatError, match=re.escape(message)):
        load_beir(root)


@pytest.mark.parametrize(
    ("queries", "message"),
    [
        (
            '{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n',
            r"queries\.jsonl:2: duplicate query_id 'q1' \(first on line 1\)",
        ),
        ('{"_id": "q1", "text": null}\n', r"queries\.jsonl:1: 'text' must be a string, got NoneType"),
        ('{"text": "a"}\n', r"queries\.jsonl:1: missing '_id'"),
        ("not json\n", r"queries\.jsonl:1: malformed JSON"),
        ('"just a string"\n', r"queries\.jsonl:1: expected a JSON object, got str"),
    ],
)
def test_queries_errors(tmp_path: Path, queries: str, message: str) -> None:
    path = tmp_path / "queries.jsonl"
    path.write_text(queries, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        load_queries(path)


@pytest.mark.parametrize(
    ("qrels", "message"),
    [
        ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\n", r"test\.tsv:3: expected 3 columns"),
        ("query-id\tcorpus-id\tscore\nq1\td1\tyes\n", r"test\.tsv:2: relevance must be an integer, got 'yes'"),
        ("query-id\tcorpus-id\tscore\nq1\td1\t1.5\n", r"test\.tsv:2: relevance must be an integer, got '1\.5'"),
        ("q1 0 d1 1\nq1 d2 1\n", r"test\.tsv:2: expected 4 columns \(TREC"),
        ("q1 d1\n", r"test\.tsv:1: expected 3 columns \(BEIR.*or 4 \(TREC.*got 2"),
        (
            "q1\td1\t1\n\nq1\td1\t0\n",
            r"test\.tsv:3: duplicate judgment for query 'q1' and document 'd1' \(first on line 1\)",
        ),
    ],
)
def test_qrels_errors(tmp_path: Path, qrels: str, message: str) -> None:
    path = tmp_path / "test.tsv"
    path.write_text(qrels, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        load_qrels(path)


def test_qrels_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "x.tsv"))):
        load_qrels(tmp_path / "x.tsv")


def test_qrels_query_missing_from_queries(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "col", qrels={"test": "query-id\tcorpus-id\tscore\nq1\td1\t1\nq9\td1\t1\n"})
    with pytest.raises(DataFormatError, match=r"test\.tsv judges 1 queries that .*queries\.jsonl does not have: 'q9'"):
        load_beir(root)


def test_empty_split(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "col", qrels={"test": "query-id\tcorpus-id\tscore\n"})
    with pytest.raises(DataFormatError, match=r"test\.tsv has no judgments"):
        load_beir(root)


def test_judged_document_missing_from_corpus_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = write_beir(tmp_path / "col", qrels={"test": "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tdX\t1\n"})
    data = load_beir(root)
    assert data.qrels == {"q1": {"d1": 1, "dX": 1}}
    assert "1 judgments name documents that are not in the corpus" in caplog.text
