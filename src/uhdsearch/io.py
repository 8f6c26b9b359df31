"""Atomic writes of files and directories, .npy and JSON helpers. The only module that renames into place."""
from __future__ import annotations

import codecs
import contextlib
import ctypes
import errno
import functools
import gzip
import json
import mmap
import os
import re
import shutil
import tempfile
import threading
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from uhdsearch.errors import DataFormatError, UsageError


@contextlib.contextmanager
def atomic_directory(target: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory beside `target`; swap it into place only if the block succeeds.

    A kill at any instant leaves `target` opening to its previous or its new contents: the swap is one
    renameat2(RENAME_EXCHANGE) where the kernel has it; elsewhere the old directory is moved aside first and
    `recover_directory` (run by every reader and writer of `target`) moves it back. Temporaries that killed
    writers left beside `target` are removed by the next successful write. A failed block removes its
    temporary and any parent directories it created.

    Raises:
        FileExistsError: `target` exists and `overwrite` is False.
    """
    target = Path(target)
    recover_directory(target)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists; pass overwrite=True (CLI: --overwrite) to replace it")
    made = _make_parents(target.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-p{os.getpid()}-", dir=target.parent))
    try:
        yield tmp
        _fsync_dir(tmp)
        if target.exists():
            if not _exchange(tmp, target):
                old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-p{os.getpid()}-", dir=target.parent))
                os.rmdir(old)
                os.rename(target, old)  # until the next rename, recover_directory restores `old`
                try:
                    os.rename(tmp, target)
                except BaseException:
                    os.rename(old, target)
                    raise
                tmp = old
            # `tmp` now holds the previous contents.
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.rename(tmp, target)
        _fsync_dir(target.parent)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        for directory in made:
            with contextlib.suppress(OSError):
                directory.rmdir()  # only if still empty
        if _is_disk_full(exc):
            raise disk_full_error(target) from exc
        raise
    remove_leftovers(target)


def _is_disk_full(exc: BaseException) -> bool:
    # numpy's tofile reports a short write as "N requested and M written", with no errno.
    return isinstance(exc, OSError) and (
        exc.errno in (errno.ENOSPC, errno.EDQUOT)
        or (exc.errno is None and re.search(r"\d+ requested and \d+ written", str(exc)) is not None))


def disk_full_error(path: str | os.PathLike) -> OSError:
    """The error for a write that ran out of space: names the path and says the disk is full."""
    return OSError(errno.ENOSPC, f"disk full: no space left on the device while writing {path}; "
                                 "free some space or write elsewhere")


_SIBLING = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old)-(?:p(?P<pid>\d+)-)?[^/]*")


def _siblings(target: Path, kind: str) -> list[tuple[Path, int | None]]:
    """Temporaries of `kind` ("tmp" or "old") that atomic_directory made for `target`, with their writer's pid."""
    found = []
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return found
    for p in entries:
        m = _SIBLING.fullmatch(p.name)
        if m and m["name"] == target.name and m["kind"] == kind:
            found.append((p, int(m["pid"]) if m["pid"] else None))
    return found


def _alive(pid: int | None) -> bool:
    if pid is None or pid == os.getpid():
        return pid is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def recover_directory(target: str | os.PathLike) -> Path:
    """Undo a swap that a kill cut between its two renames; return the directory to read `target` from.

    Only the fallback swap (no RENAME_EXCHANGE) has such a moment: `target` is gone and its previous contents
    sit in a `.<name>.old-*` sibling. That sibling is renamed back; where the parent is read-only, readers are
    given the sibling's path instead. Otherwise returns `target` unchanged.
    """
    target = Path(target)
    if target.exists():
        return target
    olds = [p for p, pid in _siblings(target, "old") if not _alive(pid) and p.is_dir()]
    if not olds:
        return target
    newest = max(olds, key=lambda p: p.stat().st_mtime_ns)
    try:
        os.rename(newest, target)
    except OSError:
        return newest
    _fsync_dir(target.parent)
    return target


def remove_leftovers(target: str | os.PathLike) -> list[Path]:
    """Remove the temporaries beside `target` that killed writers left (never those of a live writer).

    Returns:
        the directories and files removed.
    """
    target = Path(target)
    removed = []
    for kind in ("tmp", "old"):
        for p, pid in _siblings(target, kind):
            if not _alive(pid):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                removed.append(p)
    return removed


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2); False where the kernel or filesystem cannot."""
    libc = _libc()
    renameat2 = getattr(libc, "renameat2", None) if libc is not None else None
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _make_parents(directory: Path) -> list[Path]:
    """mkdir -p, returning the directories it created, deepest first."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
    return missing


def check_output_dir(out: str | os.PathLike, inputs: dict[str, str | os.PathLike | None], option: str = "--out") -> None:
    """Refuse an output directory that is, holds, or lies inside an input (data or model) directory.

    Replacing it would destroy the input, with --overwrite or without.

    Raises:
        UsageError: naming both options and paths.

    Example:
        >>> check_output_dir("/data/scifact/index", {"--data": "/data/scifact"})
        Traceback (most recent call last):
        ...
        uhdsearch.errors.UsageError: --out /data/scifact/index lies inside --data /data/scifact; write the output elsewhere
    """
    out_path = Path(out).resolve()
    for name, given in inputs.items():
        if given is None:
            continue
        source = Path(given).resolve()
        if out_path == source:
            relation = "is"
        elif source in out_path.parents:
            relation = "lies inside"
        elif out_path in source.parents:
            relation = "holds"
        else:
            continue
        raise UsageError(f"{option} {out} {relation} {name} {given}; write the output elsewhere")


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a text file through a temporary file and rename; removes temporaries that killed writers left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-p{os.getpid()}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if _is_disk_full(exc):
            raise disk_full_error(path) from exc
        raise
    remove_leftovers(path)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """Parse a UTF-8 JSON file (gzip-compressed or not).

    Raises:
        DataFormatError: not UTF-8, not JSON, or nested too deeply to parse; the message names file and line.
    """
    text = "".join(line for _, line in read_lines(path, keep_ends=True))
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path} is not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise DataFormatError(f"{path} is not valid JSON: nested too deeply to read") from None


_COMPRESSED = {b"\xfd7zXZ\x00": "xz", b"BZh": "bzip2", b"\x28\xb5\x2f\xfd": "zstd", b"PK\x03\x04": "zip"}
_GZIP = b"\x1f\x8b"


def read_lines(path: str | os.PathLike, keep_ends: bool = False) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text) for each line of a UTF-8 text file; gzip input is read transparently.

    A UTF-8 byte-order mark is skipped. The file is recognised as gzip by its first bytes, whatever its name.

    Raises:
        FileNotFoundError: no such file.
        DataFormatError: UTF-16 text, another compression, NUL bytes (binary data), invalid UTF-8 or a
            damaged gzip stream; the message names the file and the line.

    Example:
        >>> import gzip, tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "q.tsv.gz"
        >>> _ = p.write_bytes(gzip.compress("a\\tb\\nc\\n".encode()))
        >>> list(read_lines(p))
        [(1, 'a\\tb'), (2, 'c')]
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"file not found: {path}")
    with open(path, "rb") as raw:
        head = raw.read(6)
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise DataFormatError(f"{path}: UTF-16 text; uhdsearch reads UTF-8 (convert it: iconv -f UTF-16 -t UTF-8)")
    for magic, name in _COMPRESSED.items():
        if head.startswith(magic):
            raise DataFormatError(f"{path}: {name}-compressed; uhdsearch reads plain or gzip-compressed UTF-8 text")
    opener = gzip.open if head[:2] == _GZIP else open
    line_no = 0
    try:
        with opener(path, "rb") as f:
            for line_no, data in enumerate(f, start=1):
                if line_no == 1 and data.startswith(codecs.BOM_UTF8):
                    data = data[len(codecs.BOM_UTF8):]
                if b"\x00" in data:
                    raise DataFormatError(f"{path}:{line_no}: NUL bytes: binary data (or UTF-16), not UTF-8 text")
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataFormatError(
                        f"{path}:{line_no}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at byte {exc.start + 1} "
                        f"of the line); uhdsearch reads UTF-8 text"
                    ) from None
                yield line_no, text if keep_ends else text.rstrip("\r\n")
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise DataFormatError(f"{path}:{line_no + 1}: damaged gzip data ({exc})") from None


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
def _libc():
    """The C library through ctypes, or None where there is none (Windows wants a library name)."""
    try:
        return ctypes.CDLL(None, use_errno=True)
    except (OSError, TypeError):
        return None


@functools.cache
def _madvise():
    """libc's madvise through ctypes, or None where there is none."""
    madvise = getattr(_libc(), "madvise", None)
    if madvise is None:
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
