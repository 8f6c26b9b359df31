"""`uhdsearch info`: the machine and the paths chosen on it, as text and JSON, through the real CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from uhdsearch.encoder import precision


def test_info_json_names_the_cpu_and_the_paths_taken(cli) -> None:
    code, out, err = cli(["info", "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert report["cpu"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert report["cpu"]["wta_path"] == precision.wta_path()
    assert report["cpu"]["cpu_model"] and report["cpu"]["cpu_count"] >= 1
    assert report["paths"]["wta_product"].startswith(precision.wta_path())
    assert "CPUExecutionProvider" in report["paths"]["onnx_providers"]
    assert report["libraries"]["torch"].startswith(torch.__version__.split("+")[0])


def test_info_text_says_which_path_and_why_on_an_avx2_cpu() -> None:
    env = {k: v for k, v in os.environ.items() if k != precision.PATH_VARIABLE}
    env.update(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
    done = subprocess.run([sys.executable, "-m", "uhdsearch.cli.main", "info"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = {line[:17].strip(): line[17:] for line in done.stdout.splitlines()}
    assert lines["cpu capability"].startswith("AVX2; native bfloat16: no")
    assert lines["wta product"].startswith("emulated (no bfloat16 matrix instructions")


def test_a_forced_path_is_reported_as_forced() -> None:
    env = {**os.environ, precision.PATH_VARIABLE: "emulated"}
    done = subprocess.run([sys.executable, "-m", "uhdsearch.cli.main", "info"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert "emulated (forced by UHDSEARCH_WTA_PATH)" in done.stdout
