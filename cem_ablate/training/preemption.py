"""Stopping a run at a step boundary when its machine is taken away (preemption).

A cluster takes a job back with a signal some seconds before SIGKILL: SLURM sends
SIGTERM on `scancel`, on preemption and at the time limit (SIGKILL follows after
`KillWait`, 30 s by default), and SIGUSR1 ahead of the limit when the job asked for
it (`#SBATCH --signal=USR1@90`). A run that receives one of `STOP_SIGNALS` finishes
the optimizer step it is in, saves a verified checkpoint there (the digest path of
`training.checkpoints`), and raises `Preempted`: nothing else is written (no
`result.json`, no outcome), so the next attempt resumes exactly where this one
stopped (the data order is a function of the step, `data.sampler`).

- The handler only records the signal; the decision is taken at an optimizer step
  boundary (never mid-accumulation: a checkpoint there would drop the accumulated
  gradients). With several ranks it is one collective decision: the largest signal
  number any rank received, reduced over a CPU (gloo) group at every step boundary,
  so every rank stops at the same step whichever rank the signal reached, and no
  device waits for it (an NCCL reduce would sync the GPU every step). Rank 0 writes;
  the save itself is collective.
- Lightning's own handling is not used for this: its `_SignalConnector` replaces the
  SIGTERM handler at the start of every fit with one that stops at the next
  *micro-batch* (mid-accumulation), decides across ranks by a broadcast made inside the
  signal handler (a collective at an arbitrary point of the other ranks' program),
  and marks the logger failed; its SLURM auto-requeue (SIGUSR1) saves
  `hpc_ckpt_<n>.ckpt` from inside the handler, which the verified resume does not
  read. So `StopAtStepBoundary` puts this module's handler back once the fit has
  started; Lightning restores the handlers it found when the fit ends.
- A second SIGINT raises KeyboardInterrupt at once (a step that hangs can still be
  interrupted); SIGTERM and SIGUSR1 are recorded once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from lightning.pytorch.utilities.types import STEP_OUTPUT

from cem_ablate.training.lightning_private import should_accumulate

if TYPE_CHECKING:
    import subprocess

    from torch.distributed import ProcessGroup

    from cem_ablate.training.checkpoints import CheckpointFiles

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
# What signal.getsignal returns and signal.signal takes.
SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Preempted(Exception):
    """The run stopped on a signal after saving a verified checkpoint at `step`
    (None: it stopped before training a step, its newest checkpoint unchanged)."""

    def __init__(self, signal_name: str, step: int | None):
        self.signal_name, self.step = signal_name, step
        where = f"at step {step}" if step is not None else "before its first step"
        super().__init__(f"preempted by {signal_name} {where}")


def exit_code(stop: Preempted) -> int:
    """A preempted command's exit status: the shell's 128 + the signal's number."""
    try:
        return 128 + signal.Signals[stop.signal_name].value
    except KeyError:
        return 128 + signal.SIGTERM.value


def exit_soon() -> None:
    """Call before a stopped process returns its exit code: its objects are left out of the
    interpreter's final garbage collection (`gc.freeze`), which for the graph of torch,
    Lightning, MLflow and SQLAlchemy takes seconds, seconds a signal's deadline
    (SLURM's KillWait) does not leave. Everything the run must keep is written by then."""
    import gc

    gc.freeze()


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopRequest:
    """Whether this process was asked to stop, and by which signal (the process has one:
    `STOP`). `listen` installs the handler for some signals while a block runs."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._listening: list[int] = []  # signals whose handler is ours now (a stack: nested listens)

    @property
    def received(self) -> str | None:
        return signal_name(self.signum) if self.signum is not None else None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: now
        if self.signum is None:
            self.signum = signum

    def clear(self) -> None:
        self.signum = None

    @contextlib.contextmanager
    def listen(self, signals: Iterable[int] = STOP_SIGNALS) -> Iterator[StopRequest]:
        """Record `signals` while the block runs (main thread only: elsewhere nothing is
        installed), then restore the handlers found. A signal ignored by the parent
        (nohup, `&`) stays ignored."""
        previous: dict[int, SignalHandler] = {}
        if not self._listening:
            self.signum = None  # a new outermost scope: an earlier run's signal is not this one's
        if threading.current_thread() is threading.main_thread():
            for signum in signals:
                current = signal.getsignal(signum)
                if current is signal.SIG_IGN or signum in self._listening:
                    continue
                previous[signum] = current
                signal.signal(signum, self._handle)
                self._listening.append(signum)
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
                self._listening.remove(signum)

    @contextlib.contextmanager
    def relay_to(self, process: subprocess.Popen[Any]) -> Iterator[StopRequest]:
        """While the block runs, a stop signal is recorded and sent on to `process` (a
        training subprocess, which stops the same way; a SIGINT this process listens to
        goes on as SIGTERM, which the subprocess stops on); main thread only."""

        def relay(signum: int, frame: FrameType | None) -> None:
            self._handle(signum, frame)
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM if signum == signal.SIGINT else signum)

        previous: dict[int, SignalHandler] = {}
        if threading.current_thread() is threading.main_thread():
            for signum in dict.fromkeys(STOP_SIGNALS + tuple(self._listening)):
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    previous[signum] = signal.signal(signum, relay)
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def reinstall(self) -> None:
        """Put this handler back on the signals it listens to (Lightning's fit replaced SIGTERM's)."""
        if threading.current_thread() is threading.main_thread():
            for signum in self._listening:
                signal.signal(signum, self._handle)


STOP = StopRequest()


class StopAtStepBoundary(L.Callback):
    """At every optimizer step boundary: if any rank was asked to stop, save a verified
    checkpoint of this step (unless it was just saved) and raise `Preempted` on every rank
    as the next batch starts: after Lightning has logged the step's metrics (and run
    the step's validation, when one is due), so the resumed attempt, which starts with
    the next step, records every (metric, step) of the curves once."""

    def __init__(self, files: CheckpointFiles, request: StopRequest = STOP) -> None:
        self.files = files  # shared with PeriodicCheckpoint
        self.request = request
        self._group: ProcessGroup | None = None  # the CPU process group of the decision (None: one process)
        self._stopped: Preempted | None = None  # decided, checkpoint saved: raised at the next batch

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.request.reinstall()  # after Lightning's _SignalConnector took SIGTERM over (module docstring)
        if trainer.world_size > 1:
            import torch.distributed as dist

            # Every rank calls this here, together: new_group is collective.
            self._group = dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: STEP_OUTPUT, batch: Any, batch_idx: int
    ) -> None:
        if self._stopped is not None or should_accumulate(trainer):  # mid-accumulation: not a boundary
            return
        signum = self.decision()
        if not signum:
            return
        step = trainer.global_step
        if self.files.saved_step != step:
            self.files.save(trainer)
        self._stopped = Preempted(signal_name(signum), step)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._stopped is not None:
            raise self._stopped

    def decision(self) -> int:
        """The largest stop signal number any rank received (0: none), the same on every
        rank (collective: every rank calls it at the same point)."""
        signum = self.request.signum or 0
        if self._group is None:
            return signum
        import torch.distributed as dist

        flag = torch.tensor([signum], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        return int(flag.item())
