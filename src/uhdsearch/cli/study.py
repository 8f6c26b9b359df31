"""`uhdsearch study NAME` (one study -> reports/NAME/result.json + PNGs), `study --list`, and `uhdsearch report`
(every study's figures and tables on one HTML page)."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import typer

from uhdsearch.errors import UsageError


def study(
    name: Optional[str] = typer.Argument(None, help="The study to run (see --list)."),
    list_: bool = typer.Option(False, "--list", help="List the studies and their options, then exit."),
    set_: list[str] = typer.Option([], "--set", help="Change an option: key=value (JSON values), repeatable."),
    reports: Path = typer.Option(Path("reports"), help="Where reports/<name>/ goes."),
    cache: Path = typer.Option(Path(".cache/studies"), help="Per-step cache; a rerun resumes from it."),
) -> None:
    """Run one of the papers' studies: writes REPORTS/NAME/result.json and its PNG figures."""
    from uhdsearch.studies.registry import load_studies, parse_options, result_subdir, run_study

    studies = load_studies()
    if list_:
        for s in studies.values():
            typer.echo(f"{s.name:14s} {s.title}\n{'':14s} {s.paper}\n{'':14s} options: "
                       + ", ".join(f"{k}={v!r}" for k, v in s.defaults.items()))
        return
    if name is None:
        raise UsageError("give a study name or --list")
    if name not in studies:
        raise UsageError(f"unknown study {name!r}; known: {', '.join(studies)}")
    options = parse_options(studies[name], set_)
    command = shlex.join(["uhdsearch", "study", name, *(a for pair in set_ for a in ("--set", pair))]
                         + (["--reports", str(reports)] if reports != Path("reports") else []))
    result = run_study(name, options, reports, cache, command=command)
    typer.echo(f"wrote {reports / result_subdir(name, options) / 'result.json'} and {len(result.get('figures', {}))} figures")


def report(
    reports: Path = typer.Option(Path("reports"), help="The folder the studies wrote into."),
    out: Optional[Path] = typer.Option(None, help="The HTML page (default REPORTS/index.html)."),
) -> None:
    """Gather every study's result.json and figures into one HTML page."""
    from uhdsearch.studies.html import write_report

    path = write_report(reports, out)
    typer.echo(f"wrote {path}")
