"""The WTA product alone, on any CPU, without a model: float32, native bfloat16 and the emulated path.

The quickstart head's shape (a block of 512 token states of width 384 by a 384 x 32,768 head), random values,
`torch.addmm` as encoding runs it: the measurement of issue 33, with `uhdsearch.encoder.precision`'s own paths.
Needs torch and uhdsearch only (no backbone, no data), so it runs on a machine where nothing else is installed.

    .venv/bin/python -m benchmarks.speed.wta_product [--threads 2] [--repeats 9] [--out FILE]

Prints one line per path (median ms, x float32) and writes benchmarks/results/wta_product.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from uhdsearch.encoder.machine import cpu_record
from uhdsearch.encoder.precision import cast_for_product, native_bfloat16, wta_path, wta_product

OUT_JSON = Path(__file__).resolve().parents[1] / "results" / "wta_product.json"


def median_ms(call, repeats: int) -> float:
    call()  # warm-up: first-call dispatch and allocation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return float(sorted(times)[len(times) // 2])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed.wta_product", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--dim", type=int, default=32_768)
    parser.add_argument("--out", type=Path, default=OUT_JSON)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(args.tokens, 384, generator=generator)
    weight = torch.randn(args.dim, 384, generator=generator) * 0.05
    bias = torch.randn(args.dim, generator=generator) * 0.01
    rows = []
    float32 = median_ms(lambda: torch.addmm(bias, x, weight.t()), args.repeats)
    rows.append({"path": "float32 (the ceiling)", "ms": round(float32, 2), "x_float32": 1.0})
    wb, bb, xb = weight.bfloat16(), bias.bfloat16(), x.bfloat16()
    native_repeats = args.repeats if native_bfloat16() else 1  # a reference loop where there is no hardware
    native = median_ms(lambda: torch.addmm(bb, xb, wb.t()), native_repeats)
    rows.append({"path": "bfloat16 native", "ms": round(native, 2), "x_float32": round(native / float32, 2)})
    wc, bc = cast_for_product(weight, torch.bfloat16), cast_for_product(bias, torch.bfloat16)  # once per model
    emulated = median_ms(lambda: wta_product(x, wc, bc, torch.bfloat16), args.repeats)
    rows.append({"path": f"wta_product (takes the {wta_path()} path here)", "ms": round(emulated, 2),
                 "x_float32": round(emulated / float32, 2)})
    for row in rows:
        print(f"{row['path']:<45} {row['ms']:>10.1f} ms  {row['x_float32']:>6.2f}x float32")
    result = {"command": " ".join(["python -m benchmarks.speed.wta_product", *sys.argv[1:]]),
              "settings": {k: v for k, v in vars(args).items() if k != "out"}, "machine": cpu_record(),
              "torch": torch.__version__, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
