"""Ctrl-C that is never lost while the coordinator waits on its workers.

Python drops an exception raised inside a finalizer or a weakref callback ("Exception
ignored in ..."), and the default SIGINT handler raises KeyboardInterrupt wherever the
main thread happens to be. The coordinator's poll loop makes garbage with callbacks on
every pass (snapshots through SQLAlchemy sessions), so a Ctrl-C could land in one and
vanish: seen in practice, the first of two Ctrl-Cs to a 2-worker study printed
"Exception ignored in: <function WeakKeyDictionary...remove>" and the study ran on.
The latch raises as the default handler does and also remembers the press; `check()`
raises it again at the loop's next pass if it was swallowed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any


class InterruptLatch:
    """A context manager: SIGINT raises KeyboardInterrupt (as by default) and is remembered
    until `check()`; the previous handler is restored on exit. It takes over only from
    Python's default handler: an ignored SIGINT (a job started with `&` or nohup) stays
    ignored, a caller's own handler stays in charge, and outside the main thread (where
    no handler can be installed) `check()` never raises."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise the KeyboardInterrupt of a Ctrl-C that a callback swallowed."""
        if self.pressed:
            self.pressed = False
            raise KeyboardInterrupt

    def __enter__(self) -> InterruptLatch:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
