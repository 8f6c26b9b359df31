"""--quiet: no progress bar anywhere in the process while a command runs.

Every bar in the package is made with an explicit `disable=not show_progress`, which tqdm's own TQDM_DISABLE
variable does not override, so the bars are turned off at their class for the length of the command.
"""
from __future__ import annotations

import functools

import tqdm.std

_shown_init = tqdm.std.tqdm.__init__


def hide_progress_bars() -> None:
    """Make every tqdm bar (tqdm.auto's included: they derive from tqdm.std.tqdm) a disabled one."""

    @functools.wraps(_shown_init)
    def hidden_init(self, *args, **kwargs):
        kwargs["disable"] = True
        _shown_init(self, *args, **kwargs)

    tqdm.std.tqdm.__init__ = hidden_init


def show_progress_bars() -> None:
    """Undo hide_progress_bars (main() calls it when a command ends: in-process callers keep their bars)."""
    tqdm.std.tqdm.__init__ = _shown_init
