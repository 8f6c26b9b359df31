"""Connecting to Ray: the same code runs on a local cluster (address None) and a real one (an address)."""
from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import Callable

from uhdsearch._optional import require
from uhdsearch.errors import UsageError

logger = logging.getLogger(__name__)

# Ray gives a new node's raylet a fixed 30 s to register; a loaded 2-core machine has exceeded it (CI, stop 31).
STARTUP_TIMEOUT_TEXT = "timed out during startup"
LOCAL_START_ATTEMPTS = 3


def connect(address: str | None = None, num_cpus: int | None = None) -> ModuleType:
    """Return the `ray` module, connected: to `address` ("auto", "ray://host:10001", "host:6379") or, when None,
    to a cluster this process already joined or else a new local one with `num_cpus` CPUs (started up to
    LOCAL_START_ATTEMPTS times when Ray reports a startup timeout).

    Raises:
        ImportError: ray is not installed (names the extra).
        UsageError: num_cpus given together with an address (a real cluster has its own).
    """
    ray = require("ray", "ray")
    if ray.is_initialized():
        return ray
    if address is not None and num_cpus is not None:
        raise UsageError("num_cpus applies to a new local cluster only; a cluster at an address has its own CPUs")

    def init() -> None:
        # The dashboard's web server costs a process and a port; nothing here reads it.
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING,
                 log_to_driver=False)

    if address is None:
        # Ray's own wait for its GCS server (30 s) is an environment setting; the raylet's is not.
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "180")
        start_with_retries(init, ray.shutdown, LOCAL_START_ATTEMPTS)
    else:
        init()
    logger.info("connected to Ray: %s", ray.cluster_resources())
    return ray


def start_with_retries(start: Callable[[], None], shutdown: Callable[[], None], attempts: int) -> None:
    """Call `start`; when it fails with Ray's startup timeout, call `shutdown`, kill the processes the failed try
    left behind (children of this process that were not there before it) and try again, `attempts` times in all.
    Any other error, or the last timeout, is raised as it came."""
    import psutil

    me = psutil.Process()
    for attempt in range(1, attempts + 1):
        before = {child.pid for child in me.children(recursive=True)}
        try:
            start()
            return
        except Exception as error:
            if STARTUP_TIMEOUT_TEXT not in str(error) or attempt == attempts:
                raise
            logger.warning("Ray's local node did not start (try %d of %d): %s; starting it again", attempt,
                           attempts, error)
            shutdown()
            leftovers = [child for child in me.children(recursive=True) if child.pid not in before]
            for child in leftovers:
                try:
                    child.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(leftovers, timeout=10)


def positive(value: int, name: str) -> int:
    """`value` as an int > 0, or a UsageError naming the option."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UsageError(f"{name}={value!r} must be a positive integer")
    return value
