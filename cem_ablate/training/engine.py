"""Train one run config: the engine the CLI and the study runner call.

    result = train_run(cfg, run_dir=Path("runs/x"), tracking_uri=..., mlflow_run_id=...)

The path of a run: validate the config -> claim the run folder -> prepare the data
(tokenizer and token cache, built once) -> build the model around the data's
vocabulary -> Lightning fit (resuming the newest checkpoint whose recorded digest
matches, `training.checkpoints`) -> final validation and test -> `TrainResult`, written
to `<run_dir>/result.json` and to MLflow.

- Divergence (non-finite loss) is a result, `TrialStatus.DIVERGED`, never an exception.
- Any other error during training is `TrialStatus.FAILED` with the error text (running
  out of device memory: what the step asked for and what the device holds,
  `training.out_of_memory`); bad configuration raises `ConfigError` before anything starts.
- Rerunning a run whose folder holds a finished or diverged result returns it
  without training; a killed run resumes from its last checkpoint and ends exactly
  where the uninterrupted run would have (see `cem_ablate.data.sampler`).
- DDP (devices x num_nodes > 1): Lightning re-executes the launching script once per
  rank. Only a script that is safe to re-run may train in-process: the
  `cem-ablate train` CLI passes `ddp_in_process=True`. Every other caller (the study
  runner, notebooks) gets the run launched as a subprocess,
  `python -m cem_ablate.training.launch <run_dir>`, and its result read back from
  `result.json`. `extra_callbacks` cannot cross that process boundary.
- A study trial trains under a `lease` (`training.lease`): every write of the run (the
  folder, checkpoints, `result.json`, MLflow) checks it first, and a run whose lease
  was lost raises `LeaseLost` having written nothing more. (A DDP run launched as a
  subprocess checks only before and after it.)
- SIGTERM or SIGUSR1 (a cluster taking the machine back) stops the run at the next
  optimizer step boundary with a verified checkpoint there and raises `Preempted`,
  with no result written (`training.preemption`); a DDP run launched as a subprocess
  gets the signal relayed and reports the same way (exit code `PREEMPTED_EXIT`).
"""

from __future__ import annotations

import math
import sys
import time
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cem_ablate.config.trial_outcome import Cause
from cem_ablate.config.trial_status import TrialStatus
from cem_ablate.model.config import ModelConfig
from cem_ablate.model.report import ModelReport
from cem_ablate.training.budget import Budget, resolve_budget
from cem_ablate.training.child_process import die_with_parent
from cem_ablate.training.config import RunConfig
from cem_ablate.training.lease import Lease
from cem_ablate.training.preemption import STOP, Preempted, signal_name
from cem_ablate.training.result import TrainResult
from cem_ablate.training.run_directory import RunDirectory, is_rank_zero_process

# The exit code of `python -m cem_ablate.training.launch` for a preempted run (EX_TEMPFAIL:
# "try again later"): the run saved its checkpoint and wrote no result.
PREEMPTED_EXIT = 75

if TYPE_CHECKING:  # Lightning loads only when a run trains (dry runs stay fast)
    import lightning as L
    from lightning.pytorch.loggers import MLFlowLogger

    from cem_ablate.training.callbacks import ThroughputMonitor
    from cem_ablate.training.device_profile import DeviceProfile
    from cem_ablate.training.preemption import StopAtStepBoundary
    from cem_ablate.training.tasks import Task


@dataclass(frozen=True)
class ResolvedRun:
    """A validated run with what it resolves to before training (token budget, model
    report): for `cem-ablate train --dry-run` and the study's cost estimates."""

    config: RunConfig
    budget: Budget
    report: ModelReport
    model_config: ModelConfig | None

    @property
    def train_flops(self) -> float:
        """Total training FLOPs: training (forward + backward) FLOPs/token x tokens."""
        return self.report.train_flops_per_token * self.budget.tokens


def resolve_run(cfg: RunConfig) -> ResolvedRun:
    """`cfg` with its token budget and model report (the model built on the meta device: no
    memory, no training)."""
    from cem_ablate.training.networks import describe_network

    report, model_config = describe_network(cfg)
    return ResolvedRun(cfg, resolve_budget(cfg), report, model_config)


def train_run(
    cfg: RunConfig,
    *,
    run_dir: str | Path,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    mlflow_run_id: str | None = None,
    extra_callbacks: Sequence = (),
    resume: bool = True,
    progress: bool = True,
    ddp_in_process: bool = False,
    lease: Lease | None = None,
) -> TrainResult:
    folder = RunDirectory(run_dir, lease)
    if resume and (ended := folder.finished_result(cfg)) is not None:
        return ended
    if cfg.train.world_size > 1 and not ddp_in_process:
        return _train_in_subprocess(
            cfg, folder, tracking_uri, experiment, mlflow_run_id, extra_callbacks, resume, progress
        )
    if is_rank_zero_process():
        folder.claim(cfg, resume)
    from cem_ablate.tracking.store import default_tracking_uri

    with STOP.listen():
        return _Session(
            cfg,
            folder,
            tracking_uri or default_tracking_uri(),
            experiment or cfg.name,
            mlflow_run_id,
            list(extra_callbacks),
            resume,
            progress,
        ).run()


class _Session:
    """One process's part of a run (every DDP rank runs one)."""

    def __init__(
        self,
        cfg: RunConfig,
        folder: RunDirectory,
        tracking_uri: str,
        experiment: str,
        mlflow_run_id: str | None,
        extra_callbacks: list,
        resume: bool,
        progress: bool,
    ):
        self.cfg, self.folder = cfg, folder
        self.tracking_uri, self.experiment, self.mlflow_run_id = tracking_uri, experiment, mlflow_run_id
        self.extra_callbacks, self.resume, self.progress = extra_callbacks, resume, progress
        self.rank_zero = is_rank_zero_process()
        self.owns_run = mlflow_run_id is None  # a handed-in run (a study's trial) is the caller's to end
        self.budget = resolve_budget(cfg, _tokenizer_vocab_size(cfg))
        self.logger: MLFlowLogger | None = None
        self.task: Task | None = None
        self.trainer: L.Trainer | None = None
        self.throughput: ThroughputMonitor | None = None
        self.profile: DeviceProfile | None = None  # resolved when the run starts (training.device_profile)
        self.stopper: StopAtStepBoundary | None = None

    def run(self) -> TrainResult:
        start = time.time()
        warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\)` is deprecated.*")
        try:
            result = self._train()
        except BaseException as err:  # noqa: BLE001  the one failure path: a result or raised on (training.failure)
            result = self._failed(err)
        result.seconds = time.time() - start
        if self.rank_zero:
            self.folder.write_result(result)
            self._log_outcome(result)
        return result

    def _failed(self, err: BaseException) -> TrainResult:
        """The run's result where `err`'s cause makes it one (an error, out of device memory);
        otherwise the exception goes on to the caller (a preempted run marked so first)."""
        from cem_ablate.training.device_profile import device_type_of
        from cem_ablate.training.failure import failure_of
        from cem_ablate.training.out_of_memory import release_cached_memory

        device_type = self.profile.device_type if self.profile else device_type_of(self.cfg.train)
        failure = failure_of(err, [self.folder.path], self.tracking_uri, device_type)
        if failure.cause == Cause.PREEMPTED and self.rank_zero:
            self._mark_preempted()
        if not failure.outcome.meaning.run_result:
            if failure.error is err:
                raise err
            raise failure.error from None  # the one line it becomes (a lost server)
        self.folder.may_write()  # an error of a fenced run (e.g. Optuna refusing it) is not its result
        if failure.cause == Cause.OUT_OF_MEMORY:
            release_cached_memory(device_type)
        if self.rank_zero:
            traceback.print_exception(err, file=sys.stderr)
        return self._result(TrialStatus.FAILED, error=failure.outcome.reason, cause=failure.cause)

    # -- the run ------------------------------------------------------------------------
    def _train(self) -> TrainResult:
        import torch

        from cem_ablate.training.callbacks import PeriodicCheckpoint, PrintProgress, ThroughputMonitor
        from cem_ablate.training.device_profile import resolve_device_profile
        from cem_ablate.training.hardware import total_peak_flops
        from cem_ablate.training.preemption import StopAtStepBoundary
        from cem_ablate.training.seeding import seed_run
        from cem_ablate.training.tasks import build_task
        from cem_ablate.training.trainer_factory import build_trainer, is_terminal

        cfg, train, budget = self.cfg, self.cfg.train, self.budget
        if train.threads:
            torch.set_num_threads(train.threads)
        seed_run(train.seed)
        self.profile = profile = resolve_device_profile(train)
        self.task = task = build_task(cfg, budget, profile)
        if self.rank_zero:
            self._open_tracking()

        self.throughput = ThroughputMonitor(
            tokens_per_micro_batch=train.batch_size * train.world_size * budget.tokens_per_sequence,
            tokens_per_step=budget.tokens_per_step,
            train_flops_per_token=task.report.train_flops_per_token,
            peak_flops=total_peak_flops(profile.device_type, profile.precision, train.devices, train.num_nodes),
            log_every_n_steps=train.log_every_n_steps,
            ckpt_every_n_steps=train.ckpt_every_n_steps,
        )
        files = self.folder.checkpoints  # one object: a stop at a periodic step reuses its checkpoint
        self.stopper = StopAtStepBoundary(files)
        callbacks: list[L.Callback] = [
            self.throughput,
            PeriodicCheckpoint(files, train.ckpt_every_n_steps),
            self.stopper,
        ]
        bar = self.progress and is_terminal()
        if self.progress and not bar:
            callbacks.append(PrintProgress(budget.steps, train.log_every_n_steps))
        self.trainer = trainer = build_trainer(
            train,
            budget,
            profile,
            default_root_dir=str(self.folder.path),
            logger=self.logger,
            callbacks=callbacks + self.extra_callbacks,
            progress_bar=bar,
        )
        ckpt = self.folder.resume_checkpoint(warn=self.rank_zero) if self.resume else None
        with warnings.catch_warnings():
            # Mid-epoch resume is exact here: the data order is a function of the step (data.sampler).
            warnings.filterwarnings("ignore", message=".*resuming from a checkpoint that ended before the epoch.*")
            trainer.fit(task.module, datamodule=task.datamodule, ckpt_path=ckpt)
        if task.module.diverged:
            return self._result(
                TrialStatus.DIVERGED, error=f"non-finite training loss after {task.module.diverged_step} steps"
            )
        if trainer.interrupted:
            raise KeyboardInterrupt
        files.save(trainer)
        return self._result(TrialStatus.FINISHED, metrics=self._final_metrics(trainer, task))

    def _final_metrics(self, trainer: L.Trainer, task: Task) -> dict[str, float]:
        """The final validation (unless the last step had one) and the test, after the last
        checkpoint; a stop signal before or during them stops the run at the last step."""
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        self._stop_if_asked(trainer.global_step)  # a signal during the last step or its validation
        metrics = _floats(trainer.callback_metrics)
        try:  # Lightning's own SIGTERM handling is back for these two (training.preemption)
            if task.module.last_val_step != trainer.global_step:
                metrics |= _floats(trainer.validate(task.module, datamodule=task.datamodule, verbose=False)[0])
                self._stop_if_asked(trainer.global_step)
            metrics |= _floats(trainer.test(task.module, datamodule=task.datamodule, verbose=False)[0])
        except SIGTERMException:
            raise Preempted("SIGTERM", trainer.global_step) from None
        return metrics

    def _stop_if_asked(self, step: int) -> None:
        """After training (checkpoint saved): stop here if a stop signal reached any rank
        (one collective decision, as at every step boundary)."""
        assert self.stopper is not None  # _train sets it before the fit
        signum = self.stopper.decision()
        if signum:
            raise Preempted(signal_name(signum), step)

    def _mark_preempted(self) -> None:
        """A run the engine owns ends KILLED in MLflow (resumed by rerunning the command);
        a handed-in run is its owner's to mark."""
        if self.logger is None or not self.owns_run:
            return
        from cem_ablate.tracking.training_run import mark_killed

        try:
            mark_killed(self.logger)
        except Exception as err:  # noqa: BLE001 - the checkpoint is what matters; the store may be busy
            print(f"warning: could not mark the MLflow run killed: {err}", file=sys.stderr)

    def _open_tracking(self) -> None:
        """A run the engine owns gets params, config and (at the end) its outcome; a
        handed-in run gets the training curves and the device profile only: its owner
        describes and ends it."""
        from cem_ablate.tracking.training_run import log_config_text, log_params, open_logger
        from cem_ablate.training.device_profile import profile_params

        assert self.task is not None and self.profile is not None  # _train sets both before opening tracking
        run_id = self.mlflow_run_id or (self.folder.tracked_run(self.tracking_uri) if self.resume else None)
        self.logger = open_logger(
            self.tracking_uri, self.experiment, self.cfg.name, run_id, guard=self.folder.may_write
        )
        logged_run = self.logger.run_id
        assert logged_run is not None  # MLFlowLogger.run_id opens the run first (typed Optional)
        self.folder.remember_run(self.tracking_uri, logged_run)
        if self.owns_run:
            log_params(self.logger, run_params(self.cfg, self.budget, self.task.report, self.task.data_facts))
            log_config_text(self.logger, self.folder.config_file.read_text())
        # where and how the run executes, also on a study's trial: only the engine knows
        log_params(self.logger, profile_params(self.profile, self.task.module.model))

    def _result(
        self,
        status: TrialStatus,
        metrics: Mapping[str, float] | None = None,
        error: str | None = None,
        cause: Cause | None = None,
    ) -> TrainResult:
        metrics = metrics or {}
        module = self.task.module if self.task else None  # None: the run failed before its module was built
        diverged_step = module.diverged_step if module is not None else None
        trainer = self.trainer
        steps = trainer.global_step if trainer else 0
        if diverged_step is not None:
            steps = diverged_step  # the non-finite step trained nothing
        return TrainResult(
            status=status,
            steps=steps,
            tokens_seen=steps * self.budget.tokens_per_step,
            train_loss=module.last_train_loss if module is not None else math.nan,
            val_loss=metrics.get("val_loss", math.nan),
            val_ppl=metrics.get("val_ppl", math.nan),
            test_loss=metrics.get("test_loss", math.nan),
            test_ppl=metrics.get("test_ppl", math.nan),
            rmse=metrics.get("test_rmse"),
            recall_accuracy=metrics.get("test_recall_acc"),
            tokens_per_sec=self.throughput.tokens_per_sec if self.throughput else math.nan,
            mfu=self.throughput.mfu if self.throughput else math.nan,
            params=self.task.report.params_total if self.task else 0,
            flops_per_token=self.task.report.flops_per_token if self.task else 0.0,
            diverged_step=diverged_step,
            error=error,
            cause=cause,
            mlflow_run_id=self.logger.run_id if self.logger else self.mlflow_run_id,
            run_dir=str(self.folder.path),
        )

    def _log_outcome(self, result: TrainResult) -> None:
        if self.logger is None or not self.owns_run:
            return
        from cem_ablate.tracking.training_run import log_outcome

        try:
            log_outcome(self.logger, result.status, result.error, result.summary_metrics(), result.steps, result.cause)
        except Exception as err:  # noqa: BLE001 - the result stands even if the store is busy
            print(f"warning: could not record the outcome in MLflow: {err}", file=sys.stderr)


def run_params(cfg: RunConfig, budget: Budget, report: ModelReport, data_facts: Mapping[str, Any]) -> dict[str, Any]:
    """MLflow params of a run: the resolved config (dotted keys) and derived facts."""
    from cem_ablate.config.loading import flatten_dotted

    params = flatten_dotted(cfg.to_mapping())
    params.update(
        {
            "budget.tokens": budget.tokens,
            "budget.steps": budget.steps,
            "budget.accumulation": budget.accumulation,
            "budget.effective_batch": budget.effective_batch,
            "budget.rule": budget.rule,
            "params_total": report.params_total,
            "flops_per_token": report.flops_per_token,
        }
    )
    params.update({f"params.{k}": v for k, v in report.params_by_component.items()})
    params.update({f"data.{k}": v for k, v in data_facts.items()})
    return params


def _tokenizer_vocab_size(cfg: RunConfig) -> int | None:
    from cem_ablate.data.tokenizer import tokenizer_vocab_size

    return tokenizer_vocab_size(cfg.data)


def _floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()}


def _train_in_subprocess(
    cfg: RunConfig,
    folder: RunDirectory,
    tracking_uri: str | None,
    experiment: str | None,
    mlflow_run_id: str | None,
    extra_callbacks: Sequence,
    resume: bool,
    progress: bool,
) -> TrainResult:
    """DDP for library callers: `python -m cem_ablate.training.launch`, result read back."""
    import subprocess

    from cem_ablate.tracking.store import default_tracking_uri

    if extra_callbacks:
        warnings.warn("extra_callbacks are not passed to a DDP run launched as a subprocess", stacklevel=3)
    folder.claim(cfg, resume)
    command = [
        sys.executable,
        "-m",
        "cem_ablate.training.launch",
        str(folder.path),
        "--tracking-uri",
        tracking_uri or default_tracking_uri(),
        "--experiment",
        experiment or cfg.name,
    ]
    if mlflow_run_id:
        command += ["--mlflow-run-id", mlflow_run_id]
    if not resume:
        command.append("--fresh")
    if not progress:
        command.append("--no-progress")
    process = subprocess.Popen(command, preexec_fn=die_with_parent)
    with STOP.relay_to(process):  # a signal to this process alone still stops the ranks
        code = process.wait()
    if code == PREEMPTED_EXIT:
        raise Preempted(STOP.received or "a stop signal", folder.checkpoints.newest_step())
    result = folder.read_result()
    if result is None:
        return TrainResult(
            TrialStatus.FAILED,
            error=f"the DDP training process exited with code {code} and no result",
            run_dir=str(folder.path),
            mlflow_run_id=mlflow_run_id,
        )
    return result
