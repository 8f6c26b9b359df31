import numpy as np

from uhdsearch.io import is_memory_mapped, prefault


def test_only_file_mappings_count_as_memory_mapped(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(10_000, dtype=np.int64))
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert is_memory_mapped(mapped) and is_memory_mapped(np.asarray(mapped)) and is_memory_mapped(mapped[10:20])
    assert not is_memory_mapped(mapped.copy())  # still an np.memmap, but on the heap
    assert not is_memory_mapped(np.arange(10))


def test_prefault_skips_what_it_cannot_or_need_not_map(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(10_000, dtype=np.int64))
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert prefault(np.arange(100_000)) == "skipped"  # heap
    assert prefault(mapped[::-1]) == "skipped"  # not contiguous: its span is not [data, data + nbytes)
    assert prefault(mapped[:0]) == "skipped"
    assert prefault(mapped[5:]) in ("populated", "read-ahead")  # an unaligned start is rounded to its page


def test_large_blocks_go_back_to_the_system_where_glibc_allows(monkeypatch):
    import platform

    from uhdsearch.io import clib

    took = clib.return_large_blocks(1 << 20)
    assert took == (platform.system() == "Linux" and platform.libc_ver()[0] == "glibc")
    monkeypatch.setattr(clib, "libc", lambda: None)
    assert clib.return_large_blocks() is False
