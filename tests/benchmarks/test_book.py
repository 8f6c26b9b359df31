"""The results book's tables are rendered from benchmarks/results/*.json, and a page that differs from its JSON fails."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.book import tables  # noqa: F401  (registers every table)
from benchmarks.book.render import MARKER, ROOT, TABLES, page_paths, render_all, render_page, used_tables
from benchmarks.book.sources import Results

RESULTS = ROOT / "benchmarks" / "results"


def test_every_page_agrees_with_its_json():
    changed = render_all(Results(RESULTS), write=False)
    assert changed == {}, f"run `python -m benchmarks.book` and commit: {changed}"


def test_a_changed_number_fails_the_check(tmp_path: Path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    file = results / "quickstart_scifact.json"
    run = json.loads(file.read_text())
    run["systems"]["uhd-binary"]["nDCG@10"] = 0.1234
    file.write_text(json.dumps(run))
    changed = render_all(Results(results), write=False)
    assert "quickstart-scifact" in changed["docs/results/quality.md"]
    assert "headline" in changed["README.md"]


def test_every_table_is_on_a_page_and_every_marker_names_a_table():
    used = used_tables(page_paths())
    assert used == set(TABLES), f"not on any page: {set(TABLES) - used}; unknown: {used - set(TABLES)}"


def test_an_unknown_table_is_an_error_naming_the_page():
    with pytest.raises(KeyError, match="page.md: no table is named 'nope'"):
        render_page("<!-- table: nope -->\n<!-- /table -->", Results(RESULTS), page="page.md")


def test_text_outside_the_markers_is_kept():
    page = "# Title\nprose 0.5\n<!-- table: growth -->\nstale\n<!-- /table -->\nmore prose\n"
    rendered = render_page(page, Results(RESULTS))
    assert rendered.startswith("# Title\nprose 0.5\n<!-- table: growth -->\n| system |")
    assert rendered.endswith("<!-- /table -->\nmore prose\n")
    assert "stale" not in rendered and len(MARKER.findall(rendered)) == 1


def test_a_quickstart_naming_its_systems_by_their_options_renders_the_same(tmp_path: Path):
    """Since issue 34 the quickstart writes "uhd-binary-norm" for the search defaults; the book reads both."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    for name in ("quickstart_scifact.json", "quickstart_scifact_extra.json"):
        file = results / name
        file.write_text(file.read_text().replace('"uhd-binary', '"uhd-binary-norm')
                        .replace('"uhd-weighted', '"uhd-weighted-norm'))
    assert render_all(Results(results), write=False) == {}


def test_the_book_knows_the_compact_preset():
    from benchmarks.book.tables.training import COMPACT_DIM, COMPACT_EVAL_EVERY
    from uhdsearch.recipes.presets import PRESETS

    assert (COMPACT_DIM, COMPACT_EVAL_EVERY) == (PRESETS["compact"].dim, PRESETS["compact"].eval_every)
