"""`uhdsearch serve` with pause points, for the kill tests: `python pausing_server.py PAUSE_DIR serve ...`.

The real server, with three of its real functions wrapped: when the file PAUSE_DIR/<point> exists as the server
reaches that point, it writes PAUSE_DIR/paused and waits there for its SIGKILL. The points:
    before-commit-file   inside a commit: the segment and the texts are durable, the commit file not yet written
    after-commit-file    inside a commit: the commit file is written, the snapshot not yet swapped, no answer sent
    merge                a background merge's worker, before it reads its segments
"""
from __future__ import annotations

import sys
import time
from pathlib import Path


def _pause_if_armed(pause_dir: Path, point: str) -> None:
    if (pause_dir / point).exists():
        (pause_dir / "paused").write_text(point)
        while True:  # until the test kills the process
            time.sleep(1)


def install(pause_dir: Path) -> None:
    from uhdsearch.index.live import commit, merges

    write_commit, live_documents = commit.write_commit, merges.live_documents

    def pausing_write_commit(directory, body):
        _pause_if_armed(pause_dir, "before-commit-file")
        write_commit(directory, body)
        _pause_if_armed(pause_dir, "after-commit-file")

    def pausing_live_documents(*args, **kwargs):
        _pause_if_armed(pause_dir, "merge")
        return live_documents(*args, **kwargs)

    commit.write_commit = pausing_write_commit
    merges.live_documents = pausing_live_documents


if __name__ == "__main__":
    install(Path(sys.argv[1]))
    from uhdsearch.cli.main import main

    sys.exit(main(sys.argv[2:]))
