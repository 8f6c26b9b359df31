"""How much of this process's file-backed memory is mapped in (Linux /proc), for the warm-up tests."""
import sys
from pathlib import Path

import numpy as np
import pytest

from uhdsearch.io import prefault


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


def resident_mapped_bytes() -> int:
    """RssFile + RssShmem: pages of mapped files (a tmpfs file counts as shared memory)."""
    lines = Path("/proc/self/status").read_text(encoding="ascii").splitlines()
    sizes = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in lines if line.startswith(("RssFile", "RssShmem"))}
    assert "RssFile" in sizes, "/proc/self/status has no RssFile line"
    return sum(sizes.values())


def skip_unless_pages_can_be_populated(directory: Path) -> None:
    """MADV_POPULATE_READ needs Linux 5.14; elsewhere prefault only asks for read-ahead."""
    probe = directory / "probe.npy"
    np.save(probe, np.zeros(4096, np.uint64))
    if prefault(np.load(probe, mmap_mode="r")) != "populated":
        pytest.skip("this kernel cannot populate mapped pages (MADV_POPULATE_READ needs Linux 5.14+)")
