"""Benchmark settings from TOML files: each module's defaults live in benchmarks/configs/<module>.toml.

A module declares its command-line options without defaults for the settings, then calls `parse_args`: the
file named by --config (default: the script's own) gives every setting, the command line overrides single ones,
and --help shows each setting's value from the file.
Keys without a command-line option are file-only settings; they still land on the returned namespace. Every
result JSON carries `record(...)`: the command, the config file's path from the repository root, the effective
settings, uhdsearch's version, the git commit and the CPU (`benchmarks.lib.timer.cpu_record`).
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[2]  # the repository root: benchmarks/lib/settings.py
CONFIGS = ROOT / "benchmarks" / "configs"
RESULTS = ROOT / "benchmarks" / "results"


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


def record(path: Path | None, settings: dict[str, Any]) -> dict[str, Any]:
    """The keys every result JSON carries about how it was made: the command, the settings (the config file, None
    for a module without one, and the effective values), uhdsearch's version and commit, and the CPU it ran on (a
    timing means little without it: model, capability, bfloat16 hardware and the WTA product's path)."""
    from benchmarks.lib.timer import cpu_record
    from uhdsearch import __version__

    return {"command": command(), "config_file": None if path is None else relative(path), "settings": settings,
            "uhdsearch_version": __version__, "git_commit": git_commit(), "machine": cpu_record()}


def command() -> str:
    """This process's command line as typed from the repository root: `python -m benchmarks.speed.x --opt ...`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    program = f"-m {spec.name}" if spec is not None else shlex.quote(relative(Path(sys.argv[0])))
    return " ".join(["python", program, *map(shlex.quote, sys.argv[1:])])


def git_commit() -> str | None:
    """The checked-out commit, with "-dirty" where tracked files differ from it; None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
