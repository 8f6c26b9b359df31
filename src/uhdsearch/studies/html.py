"""`uhdsearch report`: every study's result.json, figures and tables on one self-contained HTML page."""
from __future__ import annotations

import html
import os
import json
from pathlib import Path
from typing import Any

from uhdsearch.errors import DataFormatError, UsageError
from uhdsearch.io import atomic_write_text

_STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}img{max-width:100%}"
          "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}"
          "code{background:#f4f4f4}")


def write_report(reports_dir: Path, out: Path | None = None) -> Path:
    """Write `out` (default reports_dir/index.html) from every reports_dir/*/result.json and, for the studies run on
    other collections, reports_dir/*/COLLECTION/result.json; returns its path.

    Raises:
        UsageError: no result.json under `reports_dir`.
        DataFormatError: a result.json that is not valid JSON (named).
    """
    reports_dir = Path(reports_dir)
    found = [*reports_dir.glob("*/result.json"), *reports_dir.glob("*/*/result.json")]
    # each study's SciFact section first, then its other collections
    results = sorted(found, key=lambda p: (p.relative_to(reports_dir).parts[0], len(p.parts), str(p)))
    if not results:
        raise UsageError(f"no */result.json under {reports_dir}: run `uhdsearch study NAME` first")
    out = Path(out) if out is not None else reports_dir / "index.html"
    names = [p.parent.relative_to(reports_dir).as_posix() for p in results]  # "index-size", "index-size/cisi"
    sections = [_section(path, name, out.parent) for path, name in zip(results, names)]
    toc = "".join(f'<li><a href="#{html.escape(n)}">{html.escape(n)}</a></li>' for n in names)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>uhdsearch studies</title>"
            f"<style>{_STYLE}</style></head><body><h1>uhdsearch studies</h1><ul>{toc}</ul>{''.join(sections)}"
            "</body></html>\n")
    atomic_write_text(out, page)
    return out


def _section(path: Path, name: str, page_dir: Path) -> str:
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path}: not valid JSON ({exc})") from exc
    collection = name.partition("/")[2]  # "" for the default collection's (SciFact's) results
    title = result.get("title", name) + (f" ({collection})" if collection else "")
    parts = [f'<h2 id="{html.escape(name)}">{html.escape(title)}</h2>',
             f"<p>{html.escape(result.get('paper', ''))}</p>",
             f"<p><code>{html.escape(result.get('command', ''))}</code> &middot; "
             f"model digest {html.escape(str(result.get('model_digest', '-')))} &middot; "
             f"{result.get('seconds', '?')} s</p>"]
    for figure in result.get("figures", {}).values():
        rel = Path(os.path.relpath((path.parent / figure).resolve(), page_dir.resolve())).as_posix()
        parts.append(f'<p><img src="{html.escape(str(rel))}" alt="{html.escape(figure)}"></p>')
    for title, rows in result.get("tables", {}).items():
        parts.append(f"<h3>{html.escape(title)}</h3>{_table(rows)}")
    if "rows" in result:
        parts.append(f"<h3>rows</h3>{_table(result['rows'])}")
    return "\n".join(parts)


def _table(rows: list[dict[str, Any]]) -> str:
    """An HTML table of dict rows (the union of their keys, in first-seen order).

    Examples:
        >>> _table([{"a": 1, "b": 0.123456}, {"a": 2}])
        '<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>0.1235</td></tr><tr><td>2</td><td></td></tr></table>'
    """
    keys = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(k))}</td>" for k in keys) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))
