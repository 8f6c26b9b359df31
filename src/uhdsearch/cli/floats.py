"""Every float option of every command refuses nan and inf at parse time (a float option takes them, and they
reach an optimizer or a threshold as a traceback or a silent no-op)."""
from __future__ import annotations

import importlib
import math


def _click_module(name: str):
    for package in ("typer._click", "click"):  # typer's vendored click (newer typer), or click itself
        try:
            return importlib.import_module(f"{package}.{name}")
        except ImportError:
            continue
    raise ImportError("neither typer._click nor click is installed")


def _is_float(param, types) -> bool:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)  # typer >= 0.29
    return annotation is float or isinstance(getattr(param, "type", None), types.FloatParamType)


def finite_floats(command):
    """`command` (a click command or group, from typer.main.get_command) with a finiteness check on each float
    option, before the option's own callback."""
    types, exceptions = _click_module("types"), _click_module("exceptions")

    def check(inner):
        def callback(ctx, param, value):
            if isinstance(value, float) and not math.isfinite(value):
                raise exceptions.BadParameter(f"{value!r} is not a finite number", ctx=ctx, param=param)
            return value if inner is None else inner(ctx, param, value)
        return callback

    def wrap(cmd) -> None:
        for param in cmd.params:
            if _is_float(param, types):
                param.callback = check(param.callback)
        for sub in getattr(cmd, "commands", {}).values():
            wrap(sub)

    wrap(command)
    return command
