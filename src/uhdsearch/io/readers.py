"""Readers that name the file and line of bad input: UTF-8 text lines (gzip read transparently), JSON, .npy."""
from __future__ import annotations

import codecs
import gzip
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from uhdsearch.errors import DataFormatError


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

    Examples:
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



def load_npy(path: str | os.PathLike, mmap: bool = False) -> np.ndarray:
    """Load an array without ever unpickling; memory-map when asked.

    Raises:
        ValueError: not an .npy file, a pickled one, or one whose header promises more or fewer bytes than it holds
            (checked before reading: a damaged header would otherwise ask for terabytes).
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        major, _ = np.lib.format.read_magic(f)
        if major not in (1, 2, 3):
            raise ValueError(f"unsupported .npy format version {major}")
        read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(f)
        expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if not dtype.hasobject and expected != size - f.tell():
            raise ValueError(f"its header promises {expected} bytes of {dtype} data {shape}, the file holds "
                             f"{size - f.tell()}")
    return np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)

