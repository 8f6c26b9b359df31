"""Atomic writes of files and directories, .npy and JSON helpers. The only module that renames into place."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory beside `target`; rename it into place only if the block succeeds.

    Raises:
        FileExistsError: `target` exists and `overwrite` is False.
    """
    target = Path(target)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists; pass overwrite=True (CLI: --overwrite) to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        _fsync_dir(tmp)
        if target.exists():
            # Move the old artifact aside first so a crash never leaves neither version on disk.
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.rmdir(old)
            os.rename(target, old)
            try:
                os.rename(tmp, target)
            except BaseException:
                os.rename(old, target)  # put the previous artifact back
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, target)
        _fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a text file through a temporary file and rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def load_npy(path: str | os.PathLike, mmap: bool = False) -> np.ndarray:
    """Load an array without ever unpickling; memory-map when asked."""
    return np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
