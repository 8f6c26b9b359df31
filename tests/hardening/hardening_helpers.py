"""Helpers of the hardening tests: the CLI in-process, its one error line, byte digests of outputs."""
from __future__ import annotations

import contextlib
import hashlib
import io
from pathlib import Path


def call(argv: list[str]) -> tuple[int, str, str]:
    """main(argv) with stdout and stderr captured."""
    from uhdsearch.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def error_line(err: str) -> str:
    """The one `error:` line of a refused command (and nothing that looks like a traceback)."""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


def digest(path: Path) -> str:
    """SHA-256 over every file name and byte under `path` (a file or a directory)."""
    h = hashlib.sha256()
    paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for p in paths:
        h.update(str(p.relative_to(path.parent)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()
