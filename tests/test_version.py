"""One version: pyproject.toml's, uhdsearch.__version__ and the newest release of CHANGELOG.md agree."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import uhdsearch

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_the_same_everywhere():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    assert declared == uhdsearch.__version__ == releases[0], (declared, uhdsearch.__version__, releases[:1])


def test_the_changelog_keeps_an_unreleased_section_above_the_releases():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.index("## [Unreleased]") < text.index(f"## [{uhdsearch.__version__}]")
