"""Connecting to Ray: the same code runs on a local cluster (address None) and a real one (an address)."""
from __future__ import annotations

import logging
from types import ModuleType

from uhdsearch._optional import require
from uhdsearch.errors import UsageError

logger = logging.getLogger(__name__)


def connect(address: str | None = None, num_cpus: int | None = None) -> ModuleType:
    """Return the `ray` module, connected: to `address` ("auto", "ray://host:10001", "host:6379") or, when None,
    to a cluster this process already joined or else a new local one with `num_cpus` CPUs.

    Raises:
        ImportError: ray is not installed (names the extra).
        UsageError: num_cpus given together with an address (a real cluster has its own).
    """
    ray = require("ray", "ray")
    if ray.is_initialized():
        return ray
    if address is not None and num_cpus is not None:
        raise UsageError("num_cpus applies to a new local cluster only; a cluster at an address has its own CPUs")
    # The dashboard's web server costs a process and a port; nothing here reads it.
    ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    logger.info("connected to Ray: %s", ray.cluster_resources())
    return ray


def positive(value: int, name: str) -> int:
    """`value` as an int > 0, or a UsageError naming the option."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UsageError(f"{name}={value!r} must be a positive integer")
    return value
