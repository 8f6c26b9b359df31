"""The papers' studies as commands: each writes reports/<name>/result.json and its PNGs (see registry.py)."""
from __future__ import annotations

from uhdsearch.studies.registry import STUDIES, Study, load_studies, run_study

__all__ = ["STUDIES", "Study", "load_studies", "run_study"]
