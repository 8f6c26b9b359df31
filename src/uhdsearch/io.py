"""Atomic writes of files and directories, .npy and JSON helpers. The only module that renames into place."""
from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import mmap
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
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
    _fsync_dir(path.parent)


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


_MADV_WILLNEED = 3
_MADV_POPULATE_READ = 22  # Linux 5.14+; Python's mmap module has no constant for it yet


def is_memory_mapped(array: np.ndarray) -> bool:
    """Whether the array's memory is a file mapping (np.load(mmap_mode=...) or a view of one), not heap memory."""
    base = array
    while base is not None:
        if isinstance(base, mmap.mmap) or getattr(base, "_mmap", None) is not None:
            return True  # a copy of an np.memmap is still an np.memmap, but with _mmap None and heap data
        base = getattr(base, "base", None)
    return False


@functools.cache
def _madvise():
    """libc's madvise through ctypes, or None where there is none."""
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError, TypeError):  # TypeError: Windows wants a library name
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return madvise


def prefault(array: np.ndarray) -> str:
    """Map a memory-mapped array's pages into the process now, so that later reads take no page faults.

    Blocks until done (MADV_POPULATE_READ), and Ctrl-C waits for it; where the kernel lacks it, asks for
    read-ahead instead (MADV_WILLNEED, which returns at once). Called through ctypes, which releases the GIL,
    so a background thread may do it while searches go on.

    Returns:
        "populated", "read-ahead", or "skipped" (not memory-mapped, empty, not contiguous, or no madvise on
        this platform).

    Example:
        >>> prefault(np.zeros(10))  # heap memory: nothing to do
        'skipped'
    """
    madvise = _madvise()
    if madvise is None or array.nbytes == 0 or not array.flags.c_contiguous or not is_memory_mapped(array):
        return "skipped"
    page = mmap.PAGESIZE
    address = array.ctypes.data
    start = address - address % page
    length = array.nbytes + (address - start)
    if madvise(start, length, _MADV_POPULATE_READ) == 0:
        return "populated"
    if madvise(start, length, _MADV_WILLNEED) == 0:
        return "read-ahead"
    return "skipped"


def prefault_all(arrays: Sequence[np.ndarray], background: bool = False) -> threading.Thread | None:
    """`prefault` each array, here or in a daemon thread.

    Returns:
        the thread when `background` (join it to wait), else None.
    """
    if not background:
        for a in arrays:
            prefault(a)
        return None
    thread = threading.Thread(target=prefault_all, args=(arrays,), name="uhdsearch-prefault", daemon=True)
    thread.start()
    return thread
