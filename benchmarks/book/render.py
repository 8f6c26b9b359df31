"""Markers, the table registry and the one rendering of a table (cells, then a line naming its sources)."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .sources import Results

ROOT = Path(__file__).resolve().parents[2]
# The pages whose tables are generated: the README's headline and the results book.
PAGES = ("README.md", "docs/results/*.md")

MARKER = re.compile(r"(<!-- table: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.DOTALL)


@dataclass
class Table:
    """One generated table: its header, its rows (cells already formatted) and where its numbers come from."""

    header: list[str]
    rows: list[list[str]]
    sources: list[str]          # result files, relative to benchmarks/results/
    command: str                # what reproduces them
    cpu: str                    # the machine they ran on, in words
    notes: list[str] = field(default_factory=list)  # lines under the table (what a mark means)

    def markdown(self) -> str:
        lines = ["| " + " | ".join(self.header) + " |", "|" + "---|" * len(self.header)]
        for row in self.rows:
            if len(row) != len(self.header):
                raise ValueError(f"a row has {len(row)} cells, the header {len(self.header)}: {row}")
            lines.append("| " + " | ".join(row) + " |")
        files = ", ".join(f"`benchmarks/results/{name}`" for name in self.sources)
        lines += ["", *self.notes] if self.notes else []
        lines += ["", f"<small>From {files} · `{self.command}` · CPU: {self.cpu}</small>"]
        return "\n".join(lines) + "\n"


TableMaker = Callable[[Results], Table]
TABLES: dict[str, TableMaker] = {}


def table(name: str) -> Callable[[TableMaker], TableMaker]:
    """Register a table maker under the name pages use in their markers."""
    def register(maker: TableMaker) -> TableMaker:
        if name in TABLES:
            raise ValueError(f"two tables are named {name!r}")
        TABLES[name] = maker
        return maker
    return register


def page_paths(root: Path = ROOT) -> list[Path]:
    paths: list[Path] = []
    for pattern in PAGES:
        paths += sorted(root.glob(pattern))
    return paths


def render_page(text: str, results: Results, page: str = "page") -> str:
    """The page with every generated table rendered again from the results."""
    def replace(match: re.Match) -> str:
        name = match["name"]
        if name not in TABLES:
            raise KeyError(f"{page}: no table is named {name!r} (known: {', '.join(sorted(TABLES))})")
        return match.group(1) + TABLES[name](results).markdown() + match.group(4)
    return MARKER.sub(replace, text)


def differing_tables(old: str, new: str) -> list[str]:
    """The names of the tables whose rendering differs between two versions of a page."""
    before = {m["name"]: m["body"] for m in MARKER.finditer(old)}
    return [m["name"] for m in MARKER.finditer(new) if before.get(m["name"]) != m["body"]]


def render_all(results: Results, root: Path = ROOT, write: bool = True) -> dict[str, list[str]]:
    """Render every page; write the changed ones (unless write is False). Returns page -> tables that differed."""
    from . import tables  # noqa: F401  (registers every table)

    changed: dict[str, list[str]] = {}
    for path in page_paths(root):
        old = path.read_text(encoding="utf-8")
        new = render_page(old, results, page=str(path.relative_to(root)))
        if new != old:
            changed[str(path.relative_to(root))] = differing_tables(old, new)
            if write:
                path.write_text(new, encoding="utf-8")
    return changed


def used_tables(paths: Iterable[Path]) -> set[str]:
    return {m["name"] for path in paths for m in MARKER.finditer(path.read_text(encoding="utf-8"))}
