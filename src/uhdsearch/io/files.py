"""Files written whole or not at all: text, JSON and .npy through a temporary file and a rename."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from uhdsearch.io.swap import current_umask, disk_full_error, fsync_dir, is_disk_full, remove_leftovers


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a text file through a temporary file and rename; removes temporaries that killed writers left."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write a file whole or not at all: a temporary file beside it (fsynced), then a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-p{os.getpid()}-", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would keep the file from other users
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_disk_full(exc):
            raise disk_full_error(path) from exc
        raise
    remove_leftovers(path)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")



def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def atomic_save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    """Write an .npy file whole or not at all: a temporary file beside it, then a rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npy")
    try:
        with open(tmp, "wb") as f:
            np.save(f, np.ascontiguousarray(array), allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)

