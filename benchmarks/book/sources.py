"""Reading result JSON files and writing their numbers the one way the book writes them."""
from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

# What older results say of their machine: they predate the `machine` record (issue 33).
UNRECORDED_CPU = "not recorded (a 2-core x86-64 machine whose CPU multiplies bfloat16 in hardware)"


class Results:
    """The result files of one folder, each read once."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def __call__(self, name: str) -> Any:
        return _read(self.folder / name)


@cache
def _read(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: a page's table reads this result file, which does not exist")
    return json.loads(path.read_text(encoding="utf-8"))


def clear_cache() -> None:
    _read.cache_clear()


def f4(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def f3(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def ms(x: float | None) -> str:
    """Milliseconds at a precision that fits their size."""
    if x is None:
        return "—"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 1 else f"{x:.3f}"


def ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


def signed(x: float) -> str:
    return f"{x:+.4f}"


def bold(cell: str, when: bool = True) -> str:
    return f"**{cell}**" if when else cell


def held_to_avx2(machine: dict) -> bool:
    """Whether a `machine` record is a CPU with more than AVX2 held to it by environment variables."""
    return bool(machine.get("held_to")) or (machine["cpu_capability"] == "AVX2"
                                            and "avx512f" in machine.get("cpu_flags", []))


def cpu(record: dict | None, fallback: str = UNRECORDED_CPU) -> str:
    """The CPU of a result, from its `machine` record (benchmarks' settings.record, uhdsearch.encoder.machine)."""
    machine = (record or {}).get("machine")
    if isinstance(machine, dict) and machine.get("cpu_model"):
        text = f"{machine['cpu_model']}, {machine.get('cpu_count', '?')} cores, capability {machine['cpu_capability']}"
        if held_to_avx2(machine):
            text += " (held to AVX2 by environment variables; the CPU has AVX512-BF16)"
        text += f"; bfloat16 hardware: {'yes' if machine.get('native_bfloat16') else 'no'}"
        return text
    model = (record or {}).get("cpu_model")
    if isinstance(model, dict):
        model = model.get("name")
    if model:
        capability = (record or {}).get("cpu_capability")
        flags = (record or {}).get("cpu_model", {}).get("vector_flags", []) if isinstance(
            (record or {}).get("cpu_model"), dict) else []
        text = str(model) + (f", capability {capability}" if capability else "")
        if "avx512_bf16" in flags:
            text += ", AVX512-BF16"
        return text
    return fallback


def system(systems: dict, name: str, default=None):
    """A system's entry under its name, or under the name a run of the search defaults carries (`-norm`): the
    quickstart names its UHD systems by their search options since issue 34 ("uhd-binary-norm")."""
    if name in systems:
        return systems[name]
    for key in (f"{name}-norm", name.replace("uhd-binary-", "uhd-binary-norm-").replace(
            "uhd-weighted-", "uhd-weighted-norm-")):
        if key in systems:
            return systems[key]
    if default is not None:
        return default
    raise KeyError(f"no system {name!r} (nor its default-options name) among {sorted(systems)}")
