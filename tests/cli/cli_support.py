"""Helpers of the CLI tests: in-process calls of `main(argv)` and the one-line `error:` contract."""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

from uhdsearch.cli.main import main

TRAIN_OPTIONS = ["--dim", "1024", "--wta-k", "8", "--query-k", "50", "--bucket-layers", "1,2",
                 "--document-max-length", "64", "--epochs", "1", "--ict-per-document", "1"]


def call(argv: list[str]) -> tuple[int, str, str]:
    """Run main(argv) with stdout and stderr captured (for module-scoped fixtures, where capsys is unavailable)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@dataclass
class Trained:
    model: Path
    binary: Path
    weighted: Path
    train_output: dict
    binary_output: dict
    weighted_output: dict


def assert_user_error(code: int, out: str, err: str, *fragments: str) -> str:
    """Exit 2, nothing on stdout, exactly one `error: ...` line on stderr that contains every fragment."""
    assert code == 2, (code, err)
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def assert_usage_error(code: int, out: str, err: str, *fragments: str) -> None:
    """A malformed option: exit 2, one `error:` line on stderr, no traceback."""
    assert code == 2, (code, err)
    assert out == ""
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def search_args(trained: Trained, *extra: str, index: Path | None = None) -> list[str]:
    return ["search", "--model", str(trained.model), "--index", str(index or trained.binary), *extra]


