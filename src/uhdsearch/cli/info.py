"""`uhdsearch info`: the machine, the paths uhdsearch takes on it and the library versions (for bug reports)."""
from __future__ import annotations

import json

import typer


def info(as_json: bool = typer.Option(False, "--json", help="One JSON object instead of text.")) -> None:
    """Print the CPU (model, capability, bfloat16 hardware), the paths chosen (WTA product, threads, ONNX
    providers) and the versions of uhdsearch and its libraries."""
    from uhdsearch.encoder.machine import format_report, machine_report

    report = machine_report()
    typer.echo(json.dumps(report, indent=2) if as_json else format_report(report))
