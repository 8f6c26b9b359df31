"""Class 1 of issue 17: a writer SIGKILLed at a step of its directory swap or at a random moment leaves the target
opening to the previous or the new version, searching exactly like it; the next write removes the temporaries.

The full run (>= 25 kills per writer) is tests/hardening/crash_harness.py; here a handful of kills per mode."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.hardening import crash_harness
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


# Steps of the quickstart output write (tests/hardening/crash_harness.py, `child`): 1-18 build model/, index-binary/,
# index-weighted/, runs/ and the JSON files inside the staging directory; with the exchange, 19 is just before the
# one swap and 20 just after it; with the fallback swap, 20 and 21 have the old directory aside and `out` missing,
# 22 is just after the new one moved in.
QUICKSTART_PLAN = [(False, 8), (False, 19), (False, 20), (True, 20), (True, 22)]


def test_quickstart_output_opens_whole_old_or_whole_new_after_kills(tmp_path):
    """Every part of the output directory (results.json, model/, both indexes, runs/) is of one version, and the
    model digest results.json and both indexes record is the model/'s beside them (crash_harness checks it)."""
    result = crash_harness.harness("quickstart", tmp_path, plan=QUICKSTART_PLAN, random_kills=1, seed=1)
    assert result["kills"] >= len(QUICKSTART_PLAN)
    assert result["outcomes"]["step:old"] == 3 and result["outcomes"]["step:new"] == 2
    assert sum(n for k, n in result["outcomes"].items() if k.startswith("random:")) == 1


def test_quickstart_output_missing_after_a_fallback_kill_is_recovered_by_a_reader_of_its_model(tmp_path):
    from uhdsearch.encoder.model import UHDEncoder

    root = tmp_path / "w"
    crash_harness.run_child("quickstart", root, 1)
    expected = crash_harness.fingerprint_of(root / "out")
    outcome, _ = crash_harness.run_child("quickstart", root, 2, step=20, fallback=True)
    assert outcome == "killed" and not (root / "out").exists()
    digest = UHDEncoder.from_pretrained(root / "out" / "model").digest()  # recovers out/ first
    assert (root / "out").is_dir() and digest == expected[1]
    assert crash_harness.fingerprint_of(root / "out") == expected


def test_the_harness_catches_an_output_directory_mixing_two_runs(tmp_path):
    """What the pre-staging quickstart could leave after a kill (model/ new, indexes old) fails the harness."""
    for version in (1, 2):
        crash_harness.run_child("quickstart", tmp_path / f"v{version}", version)
    shutil.rmtree(tmp_path / "v1" / "out" / "model")
    shutil.copytree(tmp_path / "v2" / "out" / "model", tmp_path / "v1" / "out" / "model")
    with pytest.raises(AssertionError, match=r"out mixes versions: model/ digest \w+, recorded"):
        crash_harness.fingerprint_of(tmp_path / "v1" / "out")


def test_a_failed_quickstart_write_leaves_the_output_as_it_was(tmp_path):
    from tests.hardening.hardening_helpers import digest
    from uhdsearch.recipes.quickstart import check_out_dir

    root = tmp_path / "w"
    crash_harness.run_child("quickstart", root, 1)
    before = digest(root / "out")
    with pytest.raises(RuntimeError, match="evaluation failed"):
        with atomic_directory(root / "out", overwrite=True) as stage:
            (stage / "results.json").write_text("{}")
            raise RuntimeError("evaluation failed")
    assert digest(root / "out") == before and sorted(p.name for p in root.iterdir()) == ["out"]
    with pytest.raises(FileExistsError, match=r"already holds results \(results.json, extra_results.json, model"):
        check_out_dir(root / "out", overwrite=False)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match=r"mine holds other files \(notes.txt\); the quickstart replaces its "
                                              r"output directory as a whole and would delete them"):
        check_out_dir(tmp_path / "mine", overwrite=False)
    with pytest.raises(FileExistsError, match=r"mine holds other files \(notes.txt\)"):
        check_out_dir(tmp_path / "mine", overwrite=True)  # overwrite replaces results, never other files
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    check_out_dir(tmp_path / "new", overwrite=False)  # missing or empty: fine
    (tmp_path / "new").mkdir()
    check_out_dir(tmp_path / "new", overwrite=False)


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


def test_a_forked_process_searches_after_its_parent_did(tmp_path):
    """The search thread pool is not inherited across fork (its threads are not): the child's search finishes."""
    import select
    import signal

    crash_harness.run_child("index", tmp_path, 1)
    expected = crash_harness.fingerprint_of(tmp_path / "index")  # the parent's pool now exists
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write_fd, repr(crash_harness.fingerprint_of(tmp_path / "index")).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    ready, _, _ = select.select([read_fd], [], [], 120)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    with os.fdopen(read_fd) as pipe:
        assert ready and pipe.read() == repr(expected)
