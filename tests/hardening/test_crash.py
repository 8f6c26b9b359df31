"""Class 1 of issue 17: a writer SIGKILLed at a step of its directory swap or at a random moment leaves the target
opening to the previous or the new version, searching exactly like it; the next write removes the temporaries.

The full run (>= 25 kills per writer) is benchmarks/crash_harness.py; here a handful of kills per mode."""
from __future__ import annotations

import os
import shutil

import pytest

import crash_harness
from uhdsearch.io import atomic_directory, recover_directory, remove_leftovers

# Steps of the index write (crash_harness.install_kill_at): with the exchange, 4 is just after it; with the fallback
# swap, 4 is the moment the old directory is aside and the target missing, 5 just before the new one moves in.
PLAN = [(False, 4), (True, 4), (True, 5)]


def test_index_writer_killed_at_swap_steps_and_at_random(tmp_path):
    result = crash_harness.harness("index", tmp_path, plan=PLAN, random_kills=1, seed=3)
    assert result["kills"] >= len(PLAN)
    assert result["outcomes"]["step:new"] == 1 and result["outcomes"]["step:old"] == 2


def test_kill_between_the_fallback_renames_recovers_on_open(tmp_path):
    """The one moment the target path is missing: the reader (or next writer) moves the old version back."""
    root = tmp_path / "w"
    crash_harness.run_child("index", root, 1)
    expected = crash_harness.fingerprint_of(root / "index")
    outcome, _ = crash_harness.run_child("index", root, 2, step=4, fallback=True)
    assert outcome == "killed" and not (root / "index").exists()
    assert any(p.name.startswith(".index.old-p") for p in root.iterdir())
    assert crash_harness.fingerprint_of(root / "index") == expected  # InvertedIndex.load recovered it
    assert (root / "index").is_dir()


@pytest.mark.slow
def test_model_writer_killed_at_its_swap(tmp_path):
    result = crash_harness.harness("model", tmp_path, plan=[(True, 4)], random_kills=0)
    assert result == {**result, "kills": 1, "outcomes": {"step:old": 1}}


@pytest.mark.slow
def test_quickstart_output_killed_between_and_inside_its_writes(tmp_path):
    plan = [(True, step) for step in (4, 9, 14)] + [(False, 4)]
    result = crash_harness.harness("quickstart", tmp_path, plan=plan, random_kills=2)
    assert result["kills"] >= len(plan)


def test_read_only_parent_reads_the_old_version_in_place(roomy_mount):
    import subprocess

    root = roomy_mount
    crash_harness.run_child("index", root, 1)
    expected = crash_harness.fingerprint_of(root / "index")
    crash_harness.run_child("index", root, 2, step=4, fallback=True)
    subprocess.run(["mount", "-o", "remount,ro", str(root)], check=True)
    assert recover_directory(root / "index").name.startswith(".index.old-p")
    assert crash_harness.fingerprint_of(root / "index") == expected
    assert not (root / "index").exists()


def test_leftovers_of_live_writers_are_spared(tmp_path):
    target = tmp_path / "out"
    live = tmp_path / f".out.tmp-p{os.getpid()}-abc"  # this process: alive
    dead = tmp_path / ".out.tmp-p999999999-abc"
    other = tmp_path / ".other.tmp-p999999999-abc"  # another target's
    for d in (live, dead, other):
        d.mkdir()
    with atomic_directory(target) as tmp:
        (tmp / "x").write_text("1")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, "out"])
    assert remove_leftovers(tmp_path / "other") == [other]
    shutil.rmtree(live)
