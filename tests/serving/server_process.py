"""`uhdsearch serve` as a real process for the tests that need one: start it, wait until it is ready."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(index_dir: Path, model_dir: Path, port: int, *extra: str, env: dict | None = None,
                 pause_dir: Path | None = None) -> subprocess.Popen:
    """pause_dir: run it through pausing_server.py, which stops at the points armed by files there."""
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, **(env or {}), "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    launcher = ["-m", "uhdsearch.cli.main"] if pause_dir is None else \
        [str(Path(__file__).with_name("pausing_server.py")), str(pause_dir)]
    command = [sys.executable, *launcher, "serve", str(index_dir), "--model", str(model_dir),
               "--port", str(port), *extra]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_ready(base: str, process: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {process.stdout.read()}")
        try:
            if httpx.get(f"{base}/ready", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{base} not ready after {timeout} s")


def stop(process: subprocess.Popen) -> str:
    """Kill the server (SIGKILL: no shutdown, no commit at exit); its whole output."""
    if process.poll() is None:
        process.kill()
    return process.communicate(timeout=60)[0]
