"""Benchmarks and tests import as packages (pyproject's pytest `pythonpath`): none edits sys.path."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EDIT = re.compile(r"sys\.path\s*(\.\s*(insert|append|extend|remove)\s*\(|\[[^\]]*\]\s*=|\+=|=)")


def test_no_module_under_benchmarks_or_tests_edits_sys_path():
    edits = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for folder in ("benchmarks", "tests") for path in sorted((ROOT / folder).rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if EDIT.search(line) and not line.lstrip().startswith("#") and path != Path(__file__)]
    assert edits == []


def test_the_check_sees_an_edit():
    assert EDIT.search("sys.path.insert(0, here)") and EDIT.search("sys.path[:0] = [x]")
    assert not EDIT.search("os.pathsep.join(sys.path)")
