"""Ctrl-C and SIGTERM: one way to stop a run, and never lost.

Inside `handling()`, SIGINT and SIGTERM both raise `Interrupted` in the main thread. Python drops an
exception raised inside a destructor or a callback (a weakref callback run by the garbage collector,
say), so the signal is also remembered: `check()` raises it again at the next safe point, and a run
cannot end as if nothing happened. Such a dropped `Interrupted` is not reported either (Python would
print "Exception ignored in ..." and a traceback): the run's one `# INTERRUPTED` line says it all.
`shielded()` only remembers, for cleanup that must not be cut short (stopping workers, removing
temporary files, writing index.json).
"""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal. `done` and `total` count scenario points, when known."""

    def __init__(self, signal_name: str, done: int | None = None, total: int | None = None):
        super().__init__(signal_name)
        self.signal_name, self.done, self.total = signal_name, done, total


_received: str | None = None
_depth = 0


def _remember(signum, _frame) -> None:
    global _received
    _received = signal.Signals(signum).name


def _raise(signum, frame) -> None:
    _remember(signum, frame)
    raise Interrupted(_received)


def received() -> str | None:
    """The name of the signal that arrived inside the outermost `handling()`, or None."""
    return _received


def check() -> None:
    """Raise Interrupted if a signal arrived, even one whose exception something swallowed."""
    if _received:
        raise Interrupted(_received)


def _unraisable(hook_args) -> None:
    """sys.unraisablehook inside `handling()`: a dropped Interrupted is remembered, not printed."""
    if isinstance(hook_args.exc_value, Interrupted):
        return
    sys.__unraisablehook__(hook_args)


def _install(handler) -> dict | None:
    if threading.current_thread() is not threading.main_thread():
        return None  # signal handlers can only be set from the main thread
    return {s: signal.signal(s, handler) for s in SIGNALS}


def _restore(old: dict | None) -> None:
    for s, h in (old or {}).items():
        signal.signal(s, h)


@contextmanager
def handling():
    """SIGINT and SIGTERM raise Interrupted while inside; nests (the outermost one resets the memory)."""
    global _received, _depth
    if _depth == 0:
        _received = None
    _depth += 1
    old = _install(_raise)
    old_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    try:
        yield
    finally:
        sys.unraisablehook = old_hook
        _restore(old)
        _depth -= 1


@contextmanager
def shielded():
    """Signals arriving inside are remembered, not raised: cleanup runs to its end."""
    old = _install(_remember)
    try:
        yield
    finally:
        _restore(old)
