"""The WTA product's precision: bfloat16 results on every CPU, computed the fastest way the CPU allows.

The h x dim projection dominates encoding. A model whose `wta_dtype` is bfloat16 chooses its winners among
bfloat16 products, so its codes must not depend on the machine. Two ways give those numbers:

- native: the product in bfloat16 (oneDNN). About 3-4x faster than float32 where the CPU multiplies bfloat16 in
  hardware (AVX512-BF16 or AMX), but 7x slower (and more) where it does not: there oneDNN or ATen fall back to
  converting every element on the fly.
- emulated: inputs rounded to bfloat16, multiplied in float32 (the CPU's fast path everywhere), the output
  rounded to bfloat16. The same values as native except where the two sums, in different orders, round to
  neighbouring bfloat16 numbers (about 1 in 10,000 values), so the winners agree but for such near-ties.

The path is chosen once per process from what torch reports of the CPU; `UHDSEARCH_WTA_PATH=native|emulated`
forces one (to compare them, or where the rule guesses wrong).
"""
from __future__ import annotations

import functools
import os
from typing import Literal

import torch

from uhdsearch.errors import UsageError

WtaPath = Literal["native", "emulated"]
PATH_VARIABLE = "UHDSEARCH_WTA_PATH"
PATHS = ("native", "emulated")


def product_dtype(wta_dtype: str) -> torch.dtype:
    """The torch dtype of an EncoderConfig.wta_dtype name ('bfloat16' or 'float32')."""
    return torch.bfloat16 if wta_dtype == "bfloat16" else torch.float32


@functools.cache
def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware, as torch would use it.

    torch's own view counts: a lowered ATEN_CPU_CAPABILITY or ONEDNN_MAX_CPU_ISA turns the hardware path off too.
    """
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith("AVX512"):  # AVX2, older x86, Arm: no bfloat16 matrix instructions torch uses
        return False
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


@functools.cache
def _chosen_path() -> WtaPath:
    forced = os.environ.get(PATH_VARIABLE, "").strip().lower()
    if forced:
        if forced not in PATHS:
            raise UsageError(f"{PATH_VARIABLE}={forced!r}; choose 'native' or 'emulated' (or unset it)")
        return forced  # type: ignore[return-value]
    return "native" if native_bfloat16() else "emulated"


def wta_path() -> WtaPath:
    """How CPU bfloat16 WTA products are computed in this process (see the module docstring)."""
    return _chosen_path()


def reset_wta_path() -> None:
    """Forget the chosen path, so the next product reads UHDSEARCH_WTA_PATH again (tests compare both)."""
    _chosen_path.cache_clear()


def cast_for_product(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`tensor` as the product takes it: bfloat16 (native, or any GPU), bfloat16-rounded float32 (emulated).

    Weights are cast once and cached by their callers (encoder/wta.py), so this cost is paid once per model.
    """
    if dtype != torch.bfloat16:
        return tensor.to(dtype)
    rounded = tensor.to(torch.bfloat16)
    return rounded if _native_on(tensor) else rounded.float()


def wta_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """z = x W^T + b in `dtype`'s numbers: (n, hidden) x (dim, hidden) -> (n, dim), bfloat16 or float32.

    `weight` and `bias` as cast_for_product returns them for `dtype` (the emulated path multiplies them as they
    are). With dtype bfloat16 the result is bfloat16 on every path; the emulated path rounds x to bfloat16 first.

    Examples:
        >>> x, w, b = torch.randn(3, 8), torch.randn(5, 8), torch.randn(5)
        >>> z = wta_product(x, cast_for_product(w, torch.bfloat16), cast_for_product(b, torch.bfloat16), torch.bfloat16)
        >>> z.dtype, tuple(z.shape)
        (torch.bfloat16, (3, 5))
    """
    z, round_later = wta_scores(x, weight, bias, dtype)
    return z.to(torch.bfloat16) if round_later else z


def wta_scores(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               dtype: torch.dtype) -> tuple[torch.Tensor, bool]:
    """wta_product, except that the emulated path leaves its float32 output unrounded and says so (True): the
    top-k kernel rounds the values as it reads them (winners.top_winners), saving a pass over (n, dim)."""
    if dtype != torch.bfloat16 or _native_on(x):
        return torch.addmm(bias, x.to(dtype), weight.t()), False
    return torch.addmm(bias, x.to(torch.bfloat16).float(), weight.t()), True


def _native_on(tensor: torch.Tensor) -> bool:
    return tensor.device.type != "cpu" or wta_path() == "native"
