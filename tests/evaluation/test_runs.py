from __future__ import annotations

from pathlib import Path

import pytest

from uhdsearch.errors import DataFormatError
from uhdsearch.evaluation.qrels import load_qrels, save_qrels
from uhdsearch.types import load_run, save_run
from uhdsearch.types import Run, ScoredDoc


def make_run() -> Run:
    return Run(
        {
            "q1": [ScoredDoc("d3", 12.345678901234567), ScoredDoc("d1", 0.1 + 0.2), ScoredDoc("d2", -1e-9)],
            "q2": [ScoredDoc("d9", 3.0)],
        },
        name="bm25",
    )


def test_save_writes_trec_lines(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    save_run(make_run(), path)
    assert path.read_text().splitlines() == [
        "q1 Q0 d3 1 12.345678901234567 bm25",
        "q1 Q0 d1 2 0.30000000000000004 bm25",
        "q1 Q0 d2 3 -1e-09 bm25",
        "q2 Q0 d9 1 3.0 bm25",
    ]


def test_round_trip_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    run = make_run()
    run.save(str(path))
    loaded = Run.load(str(path))
    assert loaded.results == run.results
    assert loaded.name == "bm25"


def test_save_name_overrides_run_name(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    save_run(make_run(), path, name="mine")
    assert {line.split()[-1] for line in path.read_text().splitlines()} == {"mine"}
    assert load_run(path).name == "mine"


def test_save_replaces_file_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("old\n")
    save_run(Run({"q": [ScoredDoc("d", 1.0)]}, name="x"), path)
    assert path.read_text() == "q Q0 d 1 1.0 x\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.trec"]


def test_load_sorts_by_score_then_rank(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 b 1 1.0 r\nq1 Q0 c 2 2.0 r\n\nq1 Q0 a 3 1.0 r\nq0 Q0 z 1 5 r\n")
    run = load_run(path)
    assert list(run) == ["q1", "q0"]
    assert run["q1"] == [ScoredDoc("c", 2.0), ScoredDoc("b", 1.0), ScoredDoc("a", 1.0)]  # tie: rank order
    assert run["q0"] == [ScoredDoc("z", 5.0)]


def test_load_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("")
    assert load_run(path).results == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("q1 Q0 d1 1 1.0 r\nq1 Q0 d2 2 1.0\n", r"run\.trec:2: expected 6 columns .*got 5"),
        ("q1 Q0 d1 one 1.0 r\n", r"run\.trec:1: rank must be an integer, got 'one'"),
        ("q1 Q0 d1 1 high r\n", r"run\.trec:1: score must be a number, got 'high'"),
        ("q1 Q0 d1 1 nan r\n", r"run\.trec:1: score must be finite, got 'nan'"),
        (
            "q1 Q0 d1 1 2.0 r\n\nq1 Q0 d1 2 1.0 r\n",
            r"run\.trec:3: duplicate doc_id 'd1' for query 'q1' \(first on line 1\)",
        ),
    ],
)
def test_load_malformed(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "run.trec"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=message):
        load_run(path)


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run file not found"):
        load_run(tmp_path / "none.trec")


@pytest.mark.parametrize(
    ("run", "message"),
    [
        (Run({"q 1": [ScoredDoc("d", 1.0)]}), r"query_id 'q 1' is empty or contains whitespace"),
        (Run({"q1": [ScoredDoc("", 1.0)]}), r"doc_id '' is empty or contains whitespace"),
        (Run({"q1": [ScoredDoc("d", 1.0)]}, name="my run"), r"run name 'my run'"),
        (Run({"q1": [ScoredDoc("d", float("inf"))]}), r"score inf is not finite"),
    ],
)
def test_save_rejects_unreadable_runs(tmp_path: Path, run: Run, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        save_run(run, tmp_path / "run.trec")
    assert not (tmp_path / "run.trec").exists()


@pytest.mark.parametrize("fmt", ["trec", "beir"])
def test_qrels_round_trip(tmp_path: Path, fmt: str) -> None:
    qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
    path = tmp_path / "qrels.txt"
    save_qrels(qrels, path, format=fmt)  # type: ignore[arg-type]
    assert load_qrels(path) == qrels
    first = path.read_text().splitlines()[0]
    assert first == ("query-id\tcorpus-id\tscore" if fmt == "beir" else "q1 0 d1 1")


def test_save_qrels_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"format='csv' is not supported; use 'trec' or 'beir'"):
        save_qrels({"q": {"d": 1}}, tmp_path / "q.txt", format="csv")  # type: ignore[arg-type]
