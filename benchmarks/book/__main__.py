"""`python -m benchmarks.book [--check] [--results DIR]`: render (or check) the generated tables."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .render import ROOT, render_all
from .sources import Results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.book", description=__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a page differs from its JSON")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results",
                        help="the folder of result JSON files (default: benchmarks/results)")
    args = parser.parse_args(argv)
    changed = render_all(Results(args.results), write=not args.check)
    for page, names in changed.items():
        verb = "differs from its JSON" if args.check else "rewritten"
        print(f"{page}: {', '.join(names) or 'text outside the tables'} {verb}", file=sys.stderr)
    if args.check and changed:
        print("run `python -m benchmarks.book` and commit the pages", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
