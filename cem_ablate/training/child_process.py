"""Child processes that must not outlive their parent (trial launches, study workers)."""

from __future__ import annotations

import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """`preexec_fn` of a child: the kernel sends it SIGKILL when the parent dies, even
    by SIGKILL, so a killed study or trial leaves no orphan training (Linux only; on
    other systems the child notices the parent's exit later)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
