"""What the study's code needs of a session, as Protocols the type checker holds both sessions to.

- `TrialSession`: what a claimed trial needs of the study it belongs to (`study.trial_run`,
  and the worker's heartbeat): the spec, the settings, the Optuna studies of its variants,
  the MLflow tracker, its run folder, its variant's parent run and reuse. A trial always
  belongs to one study, so `StudySession` provides it: a campaign's queue hands out the
  sessions of its own studies.
- `QueueSession`: what a worker and the coordinator need of the session they were handed,
  one study (`study.session.StudySession`) or a campaign of them
  (`study.campaign_session.CampaignSession`): the queue of (trial session, variant) pairs in
  tiers, which slots wait, every variant's Optuna studies, and the coordinator's steps
  (prepare, publish, sequential seeds, close). Its parameter is the session's publisher
  (each makes its own and takes it back in `add_seeds`).

Type-only imports: this module imports no session, so every module may name these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from optuna.storages import RDBStorage

    from cem_ablate.config.trial_record import TrialRecord
    from cem_ablate.study.settings import StudySettings
    from cem_ablate.study.spec import StudySpec
    from cem_ablate.study.trials import VariantTrials
    from cem_ablate.study.variants import ExpandedStudy, Variant
    from cem_ablate.tracking.study_runs import StudyTracker


class Publisher(Protocol):
    """Writes the parents' statistics and verdicts (`study.summary.StudyPublisher`, or a campaign's)."""

    def publish(self) -> object: ...


P = TypeVar("P", bound=Publisher)


class WorkerPayload(Protocol):
    """What a worker payload holds (`study.worker.write_worker_payload`): an ExpandedStudy
    or a `campaign_session.Campaign`, named in the payload's file by its hash."""

    @property
    def study_hash(self) -> str: ...


class TrialSession(Protocol):
    """What one claimed trial reads and writes through the study that owns it."""

    @property
    def spec(self) -> StudySpec: ...

    @property
    def settings(self) -> StudySettings: ...

    @property
    def trials(self) -> Mapping[str, VariantTrials]: ...  # variant key -> its Optuna study

    @property
    def storage(self) -> RDBStorage: ...  # the worker's heartbeat writes through it

    @property
    def tracker(self) -> StudyTracker: ...

    def run_dir(self, variant: Variant, slot_key: str, trial_key: str) -> Path: ...

    def parent_run_id(self, variant: Variant) -> str: ...

    def finished_elsewhere(self, trial_key: str, optuna_study: str) -> TrialRecord | None: ...


class QueueSession(Protocol[P]):
    """What a worker and the coordinator read of the session of a study or a campaign."""

    @property
    def expanded(self) -> WorkerPayload: ...

    @property
    def settings(self) -> StudySettings: ...

    @property
    def title(self) -> str: ...

    @property
    def study_dir(self) -> Path: ...

    @property
    def variants(self) -> list[Variant]: ...

    @property
    def trials(self) -> Mapping[str, VariantTrials]: ...

    def queue(self) -> Sequence[Sequence[tuple[TrialSession, Variant]]]: ...

    def waits(self, session: TrialSession, variant: Variant) -> Callable[[str], bool] | None: ...

    def prepare(self, echo: Callable[[str], object] = print) -> None: ...

    def publisher(self) -> P: ...

    def add_seeds(self, publisher: P) -> list[str]: ...

    def close(self) -> None: ...


class StudyOfVariants(TrialSession, Protocol):
    """A trial's study as its publisher and its sequential seeds read it (`study.summary`,
    `study.sequential`): a trial session that also holds the expanded study and its variants."""

    @property
    def expanded(self) -> ExpandedStudy: ...

    @property
    def variants(self) -> list[Variant]: ...
