"""What this machine is and which paths uhdsearch takes on it: for `uhdsearch info`, bug reports and every
benchmark's result JSON (a timing means little without the CPU it ran on)."""
from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import sys
from typing import Any

LIBRARIES = ("torch", "numpy", "scipy", "numba", "llvmlite", "transformers", "tokenizers", "bm25s", "ir_measures",
             "onnxruntime", "faiss-cpu", "fastapi", "uvicorn", "ray", "pymilvus")


SIMD_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "asimd", "sve", "bf16")


@functools.cache
def cpu_flags() -> tuple[str, ...]:
    """Which of SIMD_FLAGS the CPU reports (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.lower().startswith(("flags", "features")):
                    present = set(line.split(":", 1)[1].split())
                    return tuple(flag for flag in SIMD_FLAGS if flag in present)
    except OSError:
        pass
    return ()


@functools.cache
def cpu_model() -> str:
    """The CPU's marketing name ("AMD EPYC 9R14", "Intel(R) Xeon(R) ..."), or the architecture where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_record() -> dict[str, Any]:
    """The CPU facts a timing depends on: model, torch's capability, bfloat16 hardware, the WTA path, cores."""
    import torch

    from uhdsearch.encoder.precision import native_bfloat16, wta_path

    return {"cpu_model": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "native_bfloat16": native_bfloat16(), "wta_path": wta_path(), "cpu_flags": list(cpu_flags()),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "machine": platform.machine()}


def machine_report() -> dict[str, Any]:
    """cpu_record plus the paths chosen on this machine and the versions of uhdsearch and its libraries."""
    import numba
    import torch

    from uhdsearch._version import __version__

    try:
        import onnxruntime

        providers: list[str] | None = list(onnxruntime.get_available_providers())
    except ImportError:
        providers = None
    return {
        "uhdsearch": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_record(),
        "paths": {"wta_product": f"{wta_path_label()}", "kernel_threads": numba.get_num_threads(),
                  "torch_threads": torch.get_num_threads(), "onnx_providers": providers,
                  "cuda": torch.cuda.is_available()},
        "libraries": {name: _version(name) for name in LIBRARIES},
    }


def wta_path_label() -> str:
    """The WTA product's path in words: which one, and why."""
    from uhdsearch.encoder.precision import PATH_VARIABLE, native_bfloat16, wta_path

    if os.environ.get(PATH_VARIABLE):
        return f"{wta_path()} (forced by {PATH_VARIABLE})"
    reason = "the CPU multiplies bfloat16 in hardware" if native_bfloat16() else \
        "no bfloat16 matrix instructions: float32 on bfloat16-rounded inputs"
    return f"{wta_path()} ({reason})"


def format_report(report: dict[str, Any]) -> str:
    """The report as aligned `key: value` lines, for a terminal or a bug report."""
    cpu, paths = report["cpu"], report["paths"]
    lines = [
        f"uhdsearch        {report['uhdsearch']} (Python {report['python']})",
        f"platform         {report['platform']}",
        f"cpu              {cpu['cpu_model']} ({cpu['machine']}, {cpu['cpu_count']} cores)",
        f"cpu capability   {cpu['cpu_capability']}; native bfloat16: {'yes' if cpu['native_bfloat16'] else 'no'}"
        f"; flags: {' '.join(cpu['cpu_flags']) or 'unknown'}",
        f"wta product      {paths['wta_product']}",
        f"threads          torch {paths['torch_threads']}, search kernels {paths['kernel_threads']}",
        f"onnx providers   {', '.join(paths['onnx_providers']) if paths['onnx_providers'] else 'onnxruntime not installed'}",
        f"cuda             {'available' if paths['cuda'] else 'not available'}",
        "libraries        " + ", ".join(f"{name} {version}" for name, version in report["libraries"].items()
                                         if version is not None),
    ]
    missing = [name for name, version in report["libraries"].items() if version is None]
    if missing:
        lines.append(f"not installed    {', '.join(missing)}")
    return "\n".join(lines)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
