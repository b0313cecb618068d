"""A Ctrl-C that Python swallows inside a garbage callback is not lost by the coordinator."""

from __future__ import annotations

import os
import signal
import sys
import weakref

import pytest

from cem_ablate.study.interrupt_latch import InterruptLatch


class _Garbage:
    pass


def _ctrl_c_inside_a_finalizer(monkeypatch) -> list[BaseException]:
    """SIGINT delivered while a weakref callback runs (as when the poll loop's garbage is
    collected): Python reports the KeyboardInterrupt to sys.unraisablehook and goes on.
    Returns what the hook received."""
    swallowed: list[BaseException] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: swallowed.append(unraisable.exc_value))

    def callback():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # the handler runs here, between bytecodes of the callback
            pass

    thing = _Garbage()
    weakref.finalize(thing, callback)
    del thing  # CPython: freed now, the callback runs now
    return swallowed


@pytest.fixture
def default_sigint():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_without_the_latch_the_press_is_lost(default_sigint, monkeypatch):
    swallowed = _ctrl_c_inside_a_finalizer(monkeypatch)
    assert [type(e) for e in swallowed] == [KeyboardInterrupt]  # reported, not raised: the study would run on


def test_the_latch_raises_a_swallowed_press_at_the_next_check(default_sigint, monkeypatch):
    with InterruptLatch() as latch:
        swallowed = _ctrl_c_inside_a_finalizer(monkeypatch)
        assert [type(e) for e in swallowed] == [KeyboardInterrupt]
        with pytest.raises(KeyboardInterrupt):
            latch.check()
        latch.check()  # once: a second check is quiet
        with pytest.raises(KeyboardInterrupt):  # an ordinary press still interrupts at once
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):
                pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_an_ignored_sigint_stays_ignored():
    """A study started with `&` or nohup ignores SIGINT; the latch must not make it listen."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with InterruptLatch() as latch:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            latch.check()
    finally:
        signal.signal(signal.SIGINT, previous)
