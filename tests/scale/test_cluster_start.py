"""A local Ray node that times out during startup is started again, and the failed try's processes are killed."""
from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from uhdsearch.scale.cluster import start_with_retries

TIMEOUT = ("The current node timed out during startup. This could happen because some of the raylet failed to "
           "startup or the GCS has become overloaded.")


class FlakyStart:
    """Starts a real child process on every try (as ray.init starts gcs_server and raylet) and fails the first
    `failures` tries with `error`."""

    def __init__(self, failures: int, error: Exception):
        self.failures, self.error = failures, error
        self.children: list[subprocess.Popen] = []
        self.shutdowns = 0

    def start(self) -> None:
        self.children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
        if len(self.children) <= self.failures:
            raise self.error

    def shutdown(self) -> None:
        self.shutdowns += 1


def alive(child: subprocess.Popen) -> bool:
    return psutil.pid_exists(child.pid) and psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE


def test_a_startup_timeout_is_retried_and_its_leftover_processes_are_killed():
    flaky = FlakyStart(failures=2, error=Exception(TIMEOUT))
    try:
        start_with_retries(flaky.start, flaky.shutdown, attempts=3)
        assert len(flaky.children) == 3 and flaky.shutdowns == 2
        assert [alive(child) for child in flaky.children] == [False, False, True]
    finally:
        for child in flaky.children:
            child.kill()
            child.wait()


def test_other_errors_and_the_last_timeout_are_raised_as_they_came():
    for failures, error, tries in ((1, ValueError("bad address"), 1), (5, Exception(TIMEOUT), 2)):
        flaky = FlakyStart(failures=failures, error=error)
        try:
            with pytest.raises(type(error), match=str(error)[:20]):
                start_with_retries(flaky.start, flaky.shutdown, attempts=2)
            assert len(flaky.children) == tries and flaky.shutdowns == tries - 1
        finally:
            for child in flaky.children:
                child.kill()
                child.wait()
