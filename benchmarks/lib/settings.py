"""Benchmark settings from TOML files: each script's defaults live in benchmarks/configs/<script>.toml.

A script declares its command-line options without defaults for the settings, then calls `parse_args`: the
file named by --config (default: the script's own) gives every setting, the command line overrides single ones,
and --help shows each setting's value from the file.
Keys without a command-line option are file-only settings; they still land on the returned namespace. The
result JSON records `record(...)`: the file's path from the repository root and the effective settings.
"""
from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "benchmarks" / "configs"


def default_config(script: str) -> Path:
    return CONFIGS / f"{script}.toml"


def read_config(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return tomllib.load(f)


def relative(path: Path) -> str:
    """The path from the repository root where it lies inside it (as results files name it)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def comma_list(kind: type = str):
    """An argparse type: "1,2" -> [kind("1"), kind("2")], the shape of a TOML array of settings."""
    def parse(text: str) -> list:
        return [kind(x) for x in text.split(",")]
    parse.__name__ = f"comma-separated {kind.__name__}"
    return parse


def parse_args(parser: argparse.ArgumentParser, script: str,
               argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, Path, dict[str, Any]]:
    """Parse `argv` with the settings of --config as defaults.

    Returns the namespace, the config file's path and the effective settings (the file's keys, after the command
    line). A config file must name exactly the settings the script's own file names.
    """
    default = default_config(script)
    parser.add_argument("--config", type=Path, default=default,
                        help=f"TOML file of the settings (default: {relative(default)}); an option given here "
                        "overrides its setting")
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", type=Path, default=default)
    path = pre.parse_known_args(argv)[0].config
    values = read_config(path)
    expected = set(read_config(default))
    if set(values) != expected:
        missing, unknown = sorted(expected - set(values)), sorted(set(values) - expected)
        parser.error(f"{path}: missing settings {missing}, unknown settings {unknown}")
    parser.set_defaults(**values)
    for action in parser._actions:  # --help shows the file's value after each setting's help
        if action.dest in values and action.choices is not None and values[action.dest] not in action.choices:
            parser.error(f"{path}: {action.dest} = {values[action.dest]!r} is not one of {list(action.choices)}")
        if action.dest in values and action.help is not argparse.SUPPRESS:
            shown = values[action.dest]
            shown = ",".join(map(str, shown)) if isinstance(shown, list) else shown
            text = f"config: {shown}".replace("%", "%%")
            action.help = f"{action.help} ({text})" if action.help else text
    args = parser.parse_args(argv)
    return args, path, {key: getattr(args, key) for key in values}


def record(path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The keys every result JSON carries about its settings and the machine it ran on (a timing means little
    without its CPU: model, capability, bfloat16 hardware and the WTA product's path)."""
    return {"config_file": relative(path), "settings": settings, "machine": machine_record()}


def machine_record() -> dict[str, Any]:
    """uhdsearch's CPU record (encoder/machine.py), for scripts that write a result JSON without `record`."""
    from uhdsearch.encoder.machine import cpu_record

    return cpu_record()
