"""The one module that touches Lightning's private names.

Training needs one thing Lightning keeps private: whether the micro-batch that just ran
ends an accumulation window (`_FitLoop._should_accumulate()`, the test Lightning's own
optimizer step and logger connector use). The recipe's check steps, the throughput
monitor and the preemption callback all ask it at every batch, and must agree with
Lightning, so they ask Lightning rather than count micro-batches themselves.

A new Lightning may rename it without notice, so it is named once here and checked at
first use: a Lightning without it is refused with one error naming the installed
version and the supported range (`SUPPORTED_LIGHTNING`, the pin of pyproject.toml),
instead of an AttributeError in the middle of a run. Like `study/optuna_storage.py`.
"""

from __future__ import annotations

from typing import Any

# The Lightning releases this module was checked against (the pin of pyproject.toml):
# the tests run on 2.6.
SUPPORTED_LIGHTNING = ">=2.4,<2.7"
SHOULD_ACCUMULATE = "_should_accumulate"  # on `trainer.fit_loop`

_checked = False


class UnsupportedLightning(RuntimeError):
    """The installed Lightning lacks a private name training relies on."""


def should_accumulate(trainer: Any) -> bool:
    """Whether the micro-batch that just ran is inside an accumulation window (the optimizer
    does not step after it): Lightning's own test."""
    fit_loop = trainer.fit_loop
    _check(fit_loop)
    return bool(getattr(fit_loop, SHOULD_ACCUMULATE)())


def _check(fit_loop: Any) -> None:
    global _checked
    if _checked:
        return
    if not callable(getattr(fit_loop, SHOULD_ACCUMULATE, None)):
        import lightning

        raise UnsupportedLightning(
            f"Lightning {lightning.__version__} has no {type(fit_loop).__name__}.{SHOULD_ACCUMULATE}(), which "
            f"training reads (cem_ablate/training/lightning_private.py); install lightning{SUPPORTED_LIGHTNING}."
        )
    _checked = True
