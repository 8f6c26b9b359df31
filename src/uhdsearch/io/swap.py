"""The crash-atomic directory swap: build beside the target, swap in one step, recover what a kill cut short."""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from uhdsearch.errors import UsageError
from uhdsearch.io.clib import libc


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
        plain_modes(tmp)
        fsync_dir(tmp)
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
            # `tmp` now holds the previous contents: a directory, or the regular file `target` was
            _remove_any(tmp)
        else:
            os.rename(tmp, target)
        fsync_dir(target.parent)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        for directory in made:
            with contextlib.suppress(OSError):
                directory.rmdir()  # only if still empty
        if is_disk_full(exc):
            raise disk_full_error(target) from exc
        raise
    remove_leftovers(target)


def _remove_any(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def plain_modes(root: Path) -> None:
    """Give `root` and everything under it the modes a plain mkdir/open would have under the umask: mkdtemp
    makes 0700 and some writers (safetensors) 0600 files, which would keep the artifact from other users."""
    mask = current_umask()
    for directory, _, files in os.walk(root):
        os.chmod(directory, 0o777 & ~mask)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                executable = os.stat(path).st_mode & 0o100
                os.chmod(path, (0o777 if executable else 0o666) & ~mask)


def current_umask() -> int:
    """The process's umask, read without changing it (/proc; elsewhere set and restored at once)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def is_disk_full(exc: BaseException) -> bool:
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
    given the sibling's path instead. Otherwise returns `target` unchanged. A missing parent is recovered
    first, so `out/model` of a directory swapped as a whole (the quickstart's) opens too.
    """
    target = Path(target)
    if target.exists():
        return target
    parent = target.parent
    if parent != target and not parent.exists():
        found = recover_directory(parent)
        if found != parent:  # read-only: the parent's previous contents are read in place
            return found / target.name
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
    fsync_dir(target.parent)
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
    lib = libc()
    renameat2 = getattr(lib, "renameat2", None) if lib is not None else None
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

    Examples:
        >>> check_output_dir("/data/scifact/index", {"--data": "/data/scifact"})
        Traceback (most recent call last):
        ...
        uhdsearch.errors.UsageError: --out /data/scifact/index lies inside --data /data/scifact; write the output elsewhere
    """
    out_path = _resolved(out, option)
    for name, given in inputs.items():
        if given is None:
            continue
        source = _resolved(given, name)
        if out_path == source:
            relation = "is"
        elif source in out_path.parents:
            relation = "lies inside"
        elif out_path in source.parents:
            relation = "holds"
        else:
            continue
        raise UsageError(f"{option} {out} {relation} {name} {given}; write the output elsewhere")



def _resolved(path: str | os.PathLike, option: str) -> Path:
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as exc:  # Python 3.11 says RuntimeError for a symlink loop, later ones OSError
        raise UsageError(f"{option} {path} cannot be resolved: {exc}") from None


def fsync_dir(path: Path) -> None:
    """fsync a directory (its entries: renames, new files); a no-op where the platform cannot."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

