"""`search --student FILE` and `serve --student FILE` encode queries with a distilled query student."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from uhdsearch.encoder.query.student import QueryStudent, StudentQueryEncoder
from uhdsearch.errors import UsageError
from uhdsearch.search.searcher import Searcher
from uhdsearch.types import format_run

# Tiny indexes still split a query's documents between threads, as in tests/index.
pytestmark = pytest.mark.usefixtures("split_tiny_indexes_between_threads")

QUERY = "vitamin D deficiency and bone fractures"
SHIPPED = Path(__file__).resolve().parents[2] / "models" / "query-student-minilm-l6-2layers.safetensors"


@pytest.fixture(scope="module")
def built(saved_model_and_index, tmp_path_factory):
    root, model, index = saved_model_and_index(60)
    student = QueryStudent(model.backbone, 1)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # not the identity: its queries differ from the backbone's first layer's
        student.head.weight.add_(0.3 * torch.randn(student.head.weight.shape, generator=generator))
    path = student.save(tmp_path_factory.mktemp("student") / "student.safetensors")
    return root, model, index, path


def test_search_with_a_student_ranks_by_its_queries(built, cli):
    root, model, index, path = built
    args = ["search", "--model", str(root / "model"), "--index", str(root / "index"), "--query", QUERY, "--k", "5"]
    code, out, err = cli([*args, "--student", str(path)])
    assert code == 0, err
    encoder = StudentQueryEncoder(model, QueryStudent.load(path, model.backbone))
    assert out == format_run(Searcher(encoder, index).search({"q1": QUERY}, k=5)) and out
    assert out != format_run(Searcher(model, index).search({"q1": QUERY}, k=5))
    code, onnx, err = cli([*args, "--student", str(path), "--onnx"])
    assert code == 0, err
    assert [line.split()[2] for line in onnx.splitlines()] == [line.split()[2] for line in out.splitlines()]


def test_search_refuses_two_query_encoders_and_a_foreign_student(built, cli):
    root, _, _, path = built
    args = ["search", "--model", str(root / "model"), "--index", str(root / "index"), "--query", QUERY]
    code, _, err = cli([*args, "--student", str(path), "--lookup"])
    assert code == 2 and "--lookup and --student" in err
    code, _, err = cli([*args, "--student", str(SHIPPED)])  # distilled from MiniLM, not the tiny backbone
    assert code == 2 and "distilled from backbone" in err and SHIPPED.name in err


def test_serve_with_a_student_answers_with_its_ranking(built, scifact_mini_dir, cli):
    from fastapi.testclient import TestClient

    from uhdsearch.cli.serve import open_service
    from uhdsearch.serving.app import create_app
    from uhdsearch.serving.settings import ServeSettings

    root, model, index, path = built
    service = open_service(root / "index", root / "model", scifact_mini_dir, False, False, 0, student=path)
    encoder = StudentQueryEncoder(model, QueryStudent.load(path, model.backbone))
    with TestClient(create_app(service, ServeSettings()), base_url="http://localhost") as client:
        hits = client.get("/search", params={"q": QUERY, "k": 5}).json()["results"][0]["hits"]
    assert [h["doc_id"] for h in hits] == Searcher(encoder, index).search({"q1": QUERY}, k=5).doc_ids("q1")
    assert [h["doc_id"] for h in hits] != Searcher(model, index).search({"q1": QUERY}, k=5).doc_ids("q1")
    with pytest.raises(UsageError, match="--shards"):  # called directly, as the CLI refuses it too
        open_service(root / "index", root / "model", None, False, False, 0, sharding=(2, None, None, 1), student=path)
    for extra, words in ((["--lookup"], "--student does not combine"), (["--shards", "2"], "--shards")):
        code, _, err = cli(["serve", str(root / "index"), "--model", str(root / "model"), "--student", str(path),
                            *extra])
        assert code == 2 and words in err
