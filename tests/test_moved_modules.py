"""Every module moved in issue 15 still imports from its old path, as a deprecated alias naming the new one."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from uhdsearch._moved import MOVED


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_old_path_imports_with_a_deprecation_warning(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"^{old} moved to {new};"):
        alias = importlib.import_module(old)
    target = importlib.import_module(new)
    public = [n for n in (getattr(target, "__all__", None) or vars(target)) if not n.startswith("_")]
    assert public and all(getattr(alias, n) is getattr(target, n) for n in public)  # the same objects
    with pytest.raises(AttributeError, match=rf"module '{old}' \(now {new}\) has no attribute 'no_such_name'"):
        alias.no_such_name  # noqa: B018


def test_from_import_of_an_old_path_in_a_fresh_interpreter():
    code = ("import warnings; warnings.simplefilter('error')\n"
            "try:\n    from uhdsearch.index.segments import SegmentedIndex\n"
            "except DeprecationWarning as w:\n    print(w)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("uhdsearch.index.segments moved to uhdsearch.index.live.segments;")
    code = "from uhdsearch.index.segments import SegmentedIndex; from uhdsearch.index.live.segments import " \
           "SegmentedIndex as S; print(SegmentedIndex is S)"
    assert subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "True"


def test_new_paths_import_without_warnings():
    code = ("import warnings; warnings.simplefilter('error')\n"
            + "".join(f"import {new}\n" for new in sorted(set(MOVED.values()))))
    subprocess.run([sys.executable, "-c", code], check=True)
