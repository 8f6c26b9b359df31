"""The mutations of tests/hardening/fuzz_formats.py: seeded damage to an artifact's files, then every manifest and commit
checksum re-computed (`reseal`) so that the damage passes the checksums and reaches the loaders and kernels.

Kinds: bit flips in an array's data, truncation inside an array (a shorter, well-formed .npy) and of the file, two
files' contents swapped, values set to 0, -1, n+1 or huge (nan/inf for floats), padding bits set (bitmaps' last
words, deletion bitsets' last byte), manifest and commit fields set to wrong values or types, damaged doc_ids.txt
lines, and .npy headers that promise another shape, dtype or order. A lookup table's .npz gets the same kinds on its
member arrays.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

MUTATIONS = ("bitflip", "truncate_array", "truncate_file", "swap", "set_value", "padding", "meta_field",
             "doc_ids", "npy_header")
N_DOCS, DIM = 2500, 256  # the fuzzed artifacts' size (fuzz_formats.py writes them)
LOOKUP_TOKENS = 200


def _data_offset(path: Path) -> int:
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        read(f)
        return f.tell()


def _value(rng: random.Random, n: int):
    return rng.choice([0, -1, n + 1, n, 2 ** 31 - 1, 2 ** 32 - 1, 2 ** 62, -2 ** 40])


def _store(flat: np.ndarray, at: int, value) -> None:
    if flat.dtype.kind == "f":
        flat[at] = float(value)
    elif flat.dtype.kind in "US":
        flat[at] = str(value)
    else:
        flat[at] = np.array(value % (1 << 64), np.uint64).astype(flat.dtype)  # wraps as a C writer's cast would


def set_values(a: np.ndarray, rng: random.Random, bounds: list[int]) -> np.ndarray:
    """A copy of `a` with 1-3 entries set to 0, -1, n+1, huge (or nan/inf for floats), n one of `bounds`."""
    a = np.array(a)
    flat = a.reshape(-1)
    if flat.size == 0:
        return np.zeros(rng.randrange(1, 4), a.dtype)
    for _ in range(rng.randrange(1, 4)):
        value = rng.choice([float("nan"), float("inf"), -1.0]) if a.dtype.kind == "f" and rng.random() < 0.3 \
            else _value(rng, rng.choice(bounds + [flat.size]))
        _store(flat, rng.randrange(flat.size), value)
    return a


def rewrite_header(npy: Path, rng: random.Random) -> None:
    """The same data under a header that promises another shape (0, n+1, huge, 2-D), dtype or order."""
    data = npy.read_bytes()[_data_offset(npy):]
    a = np.load(npy, allow_pickle=False, mmap_mode="r")
    n = a.shape[0] if a.ndim else 1
    shape = rng.choice([(0,), (n + 1,), (max(0, n - 1),), (2 ** 40,), (2 ** 62 // 8,), (n, 1), (1, n)])
    dtype = rng.choice([a.dtype, np.dtype(np.int32), np.dtype(np.uint8), np.dtype(np.float64)])
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": rng.random() < 0.2, "shape": shape}
    with open(npy, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(data)


def flip_bits(data: bytearray, start: int, rng: random.Random) -> None:
    if len(data) <= start:
        start = 0
    for _ in range(rng.randrange(1, 9)):
        at = rng.randrange(start, len(data))
        data[at] ^= 1 << rng.randrange(8)


def _n_documents_of(npy: Path) -> int:
    for directory in (npy.parent, npy.parent.parent):
        try:
            return int(json.loads((directory / "index_meta.json").read_text())["n_documents"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return N_DOCS


def set_padding(npy: Path, rng: random.Random) -> bool:
    """Set bits past the last document: bitmaps' last words, or a deletion bitset's last byte."""
    a = np.load(npy, allow_pickle=False)
    if npy.name.endswith(".bitmaps.npy") and a.size:
        n = _n_documents_of(npy)
        words = (n + 63) // 64
        if n % 64 == 0 or words == 0 or a.size % words:
            return False
        rows = a.reshape(-1, words).copy()
        chosen = rng.sample(range(rows.shape[0]), rng.randrange(1, rows.shape[0] + 1))
        rows[chosen, -1] |= ~np.uint64((1 << (n % 64)) - 1)
        np.save(npy, rows.reshape(-1))
        return True
    if a.dtype == np.uint8 and a.size:  # a deletion bitset: packbits, padding in the last byte's low bits
        a = a.copy()
        a[-1] |= np.uint8(rng.randrange(1, 256))
        np.save(npy, a)
        return True
    return False


JSON_FIELDS = {"index_meta.json": ["dim", "n_documents", "n_buckets", "format_version", "bitmap_bias",
                                   "impact_planes.dim", "impact_planes.doc_bits", "impact_planes.edges"],
               "commit": ["dim", "n_documents", "n_buckets", "next_segment", "segments.n_documents",
                          "segments.n_deleted", "segments.name", "segments"]}


def set_json_field(path: Path, rng: random.Random) -> None:
    body = json.loads(path.read_text())
    fields = JSON_FIELDS["commit" if path.name.startswith("commit_") else "index_meta.json"]
    key = rng.choice(fields)
    parent, _, leaf = key.rpartition(".")
    target = body
    if parent:
        target = body.get(parent)
        if isinstance(target, list):
            target = rng.choice(target) if target else {}
        if not isinstance(target, dict):
            return
    old = target.get(leaf)
    n = old if isinstance(old, int) and not isinstance(old, bool) else N_DOCS
    target[leaf] = rng.choice([_value(rng, n), None, "x", 1.5, [], {}, True])
    path.write_text(json.dumps(body))


def mutate_doc_ids(path: Path, rng: random.Random) -> None:
    lines = path.read_bytes().split(b"\n")
    i = rng.randrange(max(1, len(lines) - 1))
    choice = rng.randrange(5)
    if choice == 0:
        lines[i] = lines[i][:1] + bytes([rng.choice([0xff, 0xc3, 0x80, 0xed])]) + lines[i][1:]
    elif choice == 1:
        del lines[i]
    elif choice == 2:
        lines.insert(i, lines[i])
    elif choice == 3:
        lines[i] = b""
    else:
        lines[i] = b"a b\r"
    path.write_bytes(b"\n".join(lines))


def mutate(root: Path, rng: random.Random) -> str:
    """Damage one artifact in place; returns what was done (for the report of a failing case)."""
    kind = rng.choice(MUTATIONS)
    npys = sorted(root.rglob("*.npy")) or sorted(root.rglob("*.npz"))
    p = rng.choice(npys)
    if p.suffix == ".npz":
        return mutate_npz(p, rng, kind)
    if kind == "bitflip":
        data = bytearray(p.read_bytes())
        flip_bits(data, _data_offset(p), rng)
        p.write_bytes(bytes(data))
    elif kind == "truncate_array":
        a = np.load(p, allow_pickle=False)
        np.save(p, a[:rng.randrange(a.shape[0])] if a.shape[0] else a)
    elif kind == "truncate_file":
        data = p.read_bytes()
        p.write_bytes(data[:rng.randrange(len(data))])
    elif kind == "swap":
        q = rng.choice(npys)
        a, b = p.read_bytes(), q.read_bytes()
        p.write_bytes(b)
        q.write_bytes(a)
        return f"swap {p.relative_to(root)} {q.relative_to(root)}"
    elif kind == "set_value":
        np.save(p, set_values(np.load(p, allow_pickle=False), rng, [N_DOCS, DIM, _n_documents_of(p)]))
    elif kind == "padding":
        bitmaps = [q for q in npys if q.name.endswith(".bitmaps.npy") or q.parent == root and "deletions" in q.name]
        p = rng.choice(bitmaps) if bitmaps else p
        if not set_padding(p, rng):
            np.save(p, set_values(np.load(p, allow_pickle=False), rng, [N_DOCS, DIM]))
    elif kind == "meta_field":
        p = rng.choice(sorted(root.rglob("index_meta.json")) + sorted(root.glob("commit_*.json")))
        set_json_field(p, rng)
    elif kind == "npy_header":
        rewrite_header(p, rng)
    elif kind == "doc_ids":
        p = rng.choice(sorted(root.rglob("doc_ids.txt")))
        mutate_doc_ids(p, rng)
    return f"{kind} {p.relative_to(root)}"


def mutate_npz(path: Path, rng: random.Random, kind: str) -> str:
    if kind == "truncate_file":
        data = path.read_bytes()
        path.write_bytes(data[:rng.randrange(len(data))])
        return f"truncate_file {path.name}"
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    key = rng.choice(sorted(arrays))
    a = arrays[key]
    if kind in ("bitflip", "padding") and a.size:
        raw = bytearray(a.tobytes())
        flip_bits(raw, 0, rng)
        arrays[key] = np.frombuffer(bytes(raw), a.dtype).reshape(a.shape)
    elif kind == "truncate_array" and a.ndim == 1 and a.size:
        arrays[key] = a[:rng.randrange(a.shape[0])]
    elif kind == "swap":
        other = rng.choice(sorted(arrays))
        arrays[key], arrays[other] = arrays[other], a
        key = f"{key} {other}"
    elif kind == "meta_field":
        del arrays[key]
    else:
        arrays[key] = set_values(a, rng, [DIM, LOOKUP_TOKENS])
    np.savez(path, **arrays)
    return f"{kind} {path.name}:{key}"


def reseal(root: Path) -> None:
    """Re-compute every manifest size and checksum (and each commit's checksum) over the damaged files."""
    from uhdsearch.index.format import file_digest
    from uhdsearch.index.live.commit import _body_digest

    for meta_path in root.rglob("index_meta.json"):
        try:
            meta = json.loads(meta_path.read_text())
            files = meta["files"]
            for name, entry in files.items():
                path = meta_path.parent / name
                if path.is_file() and isinstance(entry, dict):
                    entry.update(bytes=path.stat().st_size, sha256=file_digest(path))
        except (ValueError, KeyError, TypeError, AttributeError, OSError):
            continue
        meta_path.write_text(json.dumps(meta))
    for commit in root.glob("commit_*.json"):
        try:
            body = json.loads(commit.read_text())
            body.pop("checksum", None)
            for entry in body.get("segments") or []:
                if not isinstance(entry, dict):
                    continue
                meta_path = root / str(entry.get("name")) / "index_meta.json"
                if meta_path.is_file():
                    entry["meta_sha256"] = file_digest(meta_path)
                deletions = entry.get("deletions")
                if isinstance(deletions, dict) and (root / str(deletions.get("file"))).is_file():
                    deletions["sha256"] = file_digest(root / deletions["file"])
            body["checksum"] = _body_digest(body)
        except (ValueError, KeyError, TypeError, AttributeError, OSError):
            continue
        commit.write_text(json.dumps(body))
