"""`uhdsearch study` and `uhdsearch report` end to end: a tiny index-size run on scifact-mini with the tiny encoder,
resumed from its cache, then gathered on one HTML page; user errors exit 2."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from uhdsearch.cli.main import main
from uhdsearch.studies.distractors import GCIDE_DICT


def test_list_names_every_study(capsys) -> None:
    assert main(["study", "--list"]) == 0
    out = capsys.readouterr().out
    assert "index-size" in out and "sizes_real" in out


@pytest.mark.parametrize("argv,needle", [(["study", "no-such-study"], "unknown study"),
                                         (["study", "index-size", "--set", "nope=1"], "--set 'nope=1'"),
                                         (["study"], "--list")])
def test_user_errors_exit_2(argv, needle, capsys, tmp_path: Path) -> None:
    assert main(argv + (["--reports", str(tmp_path)] if len(argv) > 1 else [])) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and needle in err


def test_report_without_results_is_a_user_error(tmp_path: Path, capsys) -> None:
    assert main(["report", "--reports", str(tmp_path)]) == 2
    assert "uhdsearch study" in capsys.readouterr().err


def test_report_gathers_figures_and_tables(tmp_path: Path) -> None:
    study = tmp_path / "reports" / "demo"
    study.mkdir(parents=True)
    (study / "a.png").write_bytes(b"\x89PNG fake")
    (study / "result.json").write_text(json.dumps({"title": "Demo <study>", "figures": {"a": "a.png"},
                                                   "tables": {"t": [{"k": 1, "v": 0.123456}]}}))
    assert main(["report", "--reports", str(tmp_path / "reports")]) == 0
    page = (tmp_path / "reports" / "index.html").read_text()
    assert 'src="demo/a.png"' in page and "Demo &lt;study&gt;" in page and "<td>0.1235</td>" in page
    nested = study / "cisi"  # the same study on another collection: reports/NAME/COLLECTION/
    nested.mkdir()
    (nested / "b.png").write_bytes(b"\x89PNG fake")
    (nested / "result.json").write_text(json.dumps({"title": "Demo", "figures": {"b": "b.png"}}))
    assert main(["report", "--reports", str(tmp_path / "reports")]) == 0
    page = (tmp_path / "reports" / "index.html").read_text()
    assert 'src="demo/a.png"' in page and 'src="demo/cisi/b.png"' in page
    assert 'id="demo/cisi"' in page and "Demo (cisi)</h2>" in page
    assert page.index('id="demo"') < page.index('id="demo/cisi"')  # SciFact's section first
    (study / "result.json").write_text("{not json")
    assert main(["report", "--reports", str(tmp_path / "reports")]) == 2


@pytest.mark.slow
@pytest.mark.skipif(not GCIDE_DICT.is_file(), reason="dict-gcide not installed (scripts/setup.sh installs it)")
def test_index_size_study_end_to_end_and_report(tiny_encoder_session, scifact_mini_dir: Path, tmp_path: Path,
                                                capsys) -> None:
    model = tmp_path / "model"
    tiny_encoder_session.save_pretrained(model)
    argv = ["study", "index-size", "--reports", str(tmp_path / "reports"), "--cache", str(tmp_path / "cache"),
            "--set", f"model={model}", "--set", f"data={scifact_mini_dir}", "--set", "sizes_real=[0, 60]",
            "--set", "sizes_random=[0, 60]", "--set", "bm25_sizes_real=[0, 60]", "--set", "bm25_sizes_random=[60]",
            "--set", "de_widths=[16]", "--set", "de_train_documents=80", "--set", "chunk=40"]
    assert main(argv) == 0
    path = tmp_path / "reports" / "index-size" / "scifact-mini" / "result.json"  # not SciFact: its own folder
    result = json.loads(path.read_text())
    assert result["model_digest"] == tiny_encoder_session.digest()
    assert result["command"].startswith("uhdsearch study index-size")
    systems = {r["system"] for r in result["rows"]}
    assert systems == {"bm25", "dense", "de-16", "uhd-binary", "uhd-weighted"}
    for r in result["rows"]:
        assert 0 <= r["rr@10"] <= 1 and r["err"] == pytest.approx(1 - r["rr@10"])
        if r["n_distractors"] == 0:
            assert r["distractor_outranks_pct"] == 0
    bm25 = [r for r in result["rows"] if r["system"] == "bm25"]
    assert all(r["relative_err_vs_bm25"] == 0 for r in bm25)
    for name in result["figures"].values():
        assert (path.parent / name).stat().st_size > 1000
    # a rerun loads every cached step and gives the same numbers
    assert main(argv) == 0
    assert json.loads(path.read_text())["rows"] == result["rows"]
    assert main(["report", "--reports", str(tmp_path / "reports")]) == 0
    page = (tmp_path / "reports" / "index.html").read_text()
    assert 'src="index-size/scifact-mini/rr10.png"' in page and "uhd-binary" in page


@pytest.mark.slow
@pytest.mark.skipif(not GCIDE_DICT.is_file(), reason="dict-gcide not installed (scripts/setup.sh installs it)")
def test_index_size_on_the_tiny_backbone(scifact_mini_dir: Path, tmp_path: Path) -> None:
    argv = ["study", "index-size", "--reports", str(tmp_path / "reports"), "--cache", str(tmp_path / "cache"),
            "--set", "backbone=splade-tiny", "--set", "backbone_uhd_dim=1024", "--set", f"data={scifact_mini_dir}",
            "--set", "sizes_real=[0, 50]", "--set", "sizes_random=[]", "--set", "bm25_sizes_real=[0, 50]",
            "--set", "bm25_sizes_random=[]", "--set", "de_widths=[]", "--set", "chunk=20"]
    assert main(argv) == 0
    result = json.loads((tmp_path / "reports" / "index-size" / "scifact-mini-splade-tiny" / "result.json").read_text())
    assert {r["system"] for r in result["rows"]} == {"bm25", "dense", "uhd-binary", "uhd-weighted"}
    assert "SPLADE-tiny" in result["encoders"] and result["uhd_config"]["dim"] == 1024
    assert set(result["encoding_texts_per_second"]) == {"queries", "relevant documents", "real distractors"}
    chunks = sorted((tmp_path / "cache").rglob("real-0/*.npz"))
    assert [c.name for c in chunks] == ["000000000-000000020.npz", "000000020-000000040.npz", "000000040-000000050.npz"]
