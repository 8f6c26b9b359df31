"""`uhdsearch serve` refuses bad options with one error line (exit 2) before loading anything."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize(("args", "words"), [
    (["--bm25"], "--bm25 needs --data"),
    (["--port", "70000"], "--port 70000"),
    (["--max-k", "0"], "max_k=0"),
    (["--workers", "-1"], "--workers -1"),
    (["--max-segments", "-1"], "--max-segments -1"),
])
def test_serve_option_errors(served, capsys, args, words):
    from uhdsearch.cli.main import main

    code = main(["serve", str(served / "index"), "--model", str(served / "model"), *args])
    assert code == 2
    assert words in capsys.readouterr().err


def test_serve_a_missing_index(tmp_path, served, capsys):
    from uhdsearch.cli.main import main

    assert main(["serve", str(tmp_path / "nothing"), "--model", str(served / "model")]) == 2
    assert "no index directory" in capsys.readouterr().err


def test_serve_freezes_what_it_loaded_before_it_listens(served, monkeypatch):
    """A full garbage collection over a loaded 100k-document service took ~265 ms and held every thread (the load
    run's p99); objects loaded before the server listens are frozen out of it."""
    import gc

    import uvicorn

    from uhdsearch.cli.main import main

    seen = {}

    def listen(app, **options):  # instead of serving: what the process holds when it would start listening
        seen["frozen"] = gc.get_freeze_count()
        seen["service"] = app.state.service

    monkeypatch.setattr(uvicorn, "run", listen)
    try:
        assert main(["serve", str(served / "index"), "--model", str(served / "model"), "--read-only"]) == 0
        assert seen["frozen"] > 1_000  # 0 unless something froze them
    finally:
        gc.unfreeze()
        if "service" in seen:
            seen["service"].close()
