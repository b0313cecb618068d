"""The one module that touches Optuna's private names.

The study needs four things Optuna keeps private: the storage a study was opened on
(`Study._storage`), the storage id of a trial (`Trial._trial_id`,
`FrozenTrial._trial_id`: every storage call takes it), a live `optuna.trial.Trial`
for a trial the study claimed itself (`Trial(study, trial_id)`, the constructor
`study.ask()` uses), and the private `RDBStorage` methods that Optuna's own modules
call directly (its trial cache `_CachedStorage` and `fail_stale_trials`), which the
outage-tolerant storage must wrap as well as the public ones (`study.storage`).

A new Optuna may rename any of them without notice, so they are named once, in
`PRIVATE_NAMES`, and `check_private_api()` (called where the storage is opened)
refuses an Optuna that lacks one, naming it, the installed version and the supported
range (`SUPPORTED_OPTUNA`, the pin of pyproject.toml) instead of failing mid-study.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cem_ablate.config import ConfigError

if TYPE_CHECKING:
    import optuna

# The Optuna releases whose private names this module was checked against (the pin of
# pyproject.toml): 4.7 is the first whose RDBStorage has every method of
# STORAGE_METHODS_CALLED_BY_OPTUNA (4.7 to 4.9 were read, not run); the tests run on 5.0.
SUPPORTED_OPTUNA = ">=4.7,<5.1"

STUDY = "optuna.study.Study"
TRIAL = "optuna.trial.Trial"
FROZEN_TRIAL = "optuna.trial.FrozenTrial"
RDB_STORAGE = "optuna.storages.RDBStorage"
PROBE_STUDY = "cem-ablate-private-api-probe"  # in memory, never stored


@dataclass(frozen=True)
class PrivateName:
    owner: str  # the public class that carries it
    name: str
    use: str  # what this module reads it for

    def __str__(self) -> str:
        return f"{self.owner}.{self.name}"


PRIVATE_NAMES = (
    PrivateName(STUDY, "_storage", "storage_of: the storage a study was opened on"),
    PrivateName(TRIAL, "_trial_id", "trial_id_of: the storage id of a claimed trial"),
    PrivateName(FROZEN_TRIAL, "_trial_id", "trial_id_of: the storage id of a stored trial"),
    # RDBStorage methods that Optuna's trial cache and fail_stale_trials call directly:
    # a storage that waits out outages must wrap them too (study.storage).
    PrivateName(RDB_STORAGE, "_create_new_trial", "called by Optuna's trial cache"),
    PrivateName(RDB_STORAGE, "_get_best_trial_id", "called by Optuna's trial cache"),
    PrivateName(RDB_STORAGE, "_get_stale_trial_ids", "called by Optuna's fail_stale_trials"),
    PrivateName(RDB_STORAGE, "_get_trials", "called by Optuna's trial cache"),
    PrivateName(RDB_STORAGE, "_set_trial_param", "called by Optuna's trial cache"),
)
STORAGE_METHODS_CALLED_BY_OPTUNA = frozenset(p.name for p in PRIVATE_NAMES if p.owner == RDB_STORAGE)


class UnsupportedOptuna(ConfigError):
    """The installed Optuna lacks a private name the study relies on (one line in the CLI)."""

    def __init__(self, message: str):
        super().__init__("", message)


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage `study` was opened on (for an RDBStorage: Optuna's cache in front of it)."""
    return study._storage


def trial_id_of(trial: optuna.trial.Trial | optuna.trial.FrozenTrial) -> int:
    """The storage id of a trial, live or stored: what every storage call takes."""
    return trial._trial_id


def trial_for_id(study: optuna.Study, trial_id: int) -> optuna.trial.Trial:
    """The live trial of a stored one the study claimed itself (RUNNING), as `study.ask()`
    returns it: `suggest_*`, `report` and `study.tell` work on it."""
    import optuna

    return optuna.trial.Trial(study, trial_id)


def wrapped_rdb_storage(name: str, wrap: Callable[[Callable, str], Callable]) -> type:
    """A subclass of RDBStorage, named `name`, whose public methods and the private ones
    Optuna calls directly (STORAGE_METHODS_CALLED_BY_OPTUNA) are `wrap(method, name)`."""
    import optuna

    base = optuna.storages.RDBStorage
    wrapped = {
        attr: wrap(member, attr)
        for attr, member in vars(base).items()
        if callable(member)
        and (not attr.startswith("_") or attr in STORAGE_METHODS_CALLED_BY_OPTUNA)
        and not isinstance(member, (staticmethod, classmethod))
    }
    return type(name, (base,), wrapped)


def missing_private_names() -> list[str]:
    """Each private name of PRIVATE_NAMES that the installed Optuna lacks, with its use
    (empty when all are there). Looked up on real objects made in memory: a study, a
    trial of it, a stored trial, and RDBStorage's own methods."""
    import optuna
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    storage = optuna.storages.InMemoryStorage()
    study_id = storage.create_new_study([StudyDirection.MINIMIZE], PROBE_STUDY)
    study = optuna.Study(PROBE_STUDY, storage, sampler=optuna.samplers.RandomSampler())
    owners: dict[str, object] = {
        STUDY: study,
        RDB_STORAGE: optuna.storages.RDBStorage,
        FROZEN_TRIAL: optuna.trial.create_trial(state=TrialState.WAITING),
    }
    missing = []
    try:
        owners[TRIAL] = trial_for_id(study, storage.create_new_trial(study_id))
    except (AttributeError, TypeError) as err:
        missing.append(f"{TRIAL}(study, trial_id) (trial_for_id: {err})")
    for private in PRIVATE_NAMES:
        owner = owners.get(private.owner)
        if owner is not None and not _has(owner, private.name):
            missing.append(f"{private} ({private.use})")
    return missing


def _has(owner: object, name: str) -> bool:
    # A class's own methods (what wrapped_rdb_storage wraps), an object's attributes.
    return name in vars(owner) if isinstance(owner, type) else hasattr(owner, name)


def check_private_api() -> None:
    """Refuse an Optuna that lacks a private name the study relies on (before the study
    writes anything), naming what is missing and the supported versions."""
    import optuna

    missing = missing_private_names()
    if missing:
        raise UnsupportedOptuna(
            f"Optuna {optuna.__version__} lacks {'; '.join(missing)}, which cem_ablate.study.optuna_storage "
            f"relies on; cem-ablate supports optuna{SUPPORTED_OPTUNA}: pip install 'optuna{SUPPORTED_OPTUNA}'"
        )
