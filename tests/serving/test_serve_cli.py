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
