"""Optuna's private names, in one module: they work on the installed Optuna, a missing one is
refused by name when the storage opens, and no other module of cem_ablate uses them."""

import ast
import re
from pathlib import Path

import optuna
import pytest
import tomllib
from optuna.trial import TrialState
from packaging.specifiers import SpecifierSet

import cem_ablate
from cem_ablate.study import optuna_storage
from cem_ablate.study.optuna_storage import (
    FROZEN_TRIAL,
    PRIVATE_NAMES,
    RDB_STORAGE,
    STORAGE_METHODS_CALLED_BY_OPTUNA,
    STUDY,
    SUPPORTED_OPTUNA,
    TRIAL,
    UnsupportedOptuna,
    check_private_api,
    missing_private_names,
    storage_of,
    trial_for_id,
    trial_id_of,
    wrapped_rdb_storage,
)
from cem_ablate.study.storage import StorageSettings, open_storage, outage_tolerant_storage

PACKAGE = Path(cem_ablate.__file__).resolve().parent
ADAPTER = Path(optuna_storage.__file__).resolve()
OWNERS = {
    STUDY: optuna.study.Study,
    TRIAL: optuna.trial.Trial,
    FROZEN_TRIAL: optuna.trial.FrozenTrial,
    RDB_STORAGE: optuna.storages.RDBStorage,
}


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'optuna.db'}"


# -- the adapter on the installed Optuna ---------------------------------------------------


def test_the_installed_optuna_has_every_private_name_and_is_in_the_supported_range():
    assert missing_private_names() == []
    check_private_api()
    assert SpecifierSet(SUPPORTED_OPTUNA).contains(optuna.__version__)


def test_pyproject_pins_the_range_the_adapter_names():
    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    assert f"optuna{SUPPORTED_OPTUNA}" in pyproject["project"]["dependencies"]


def test_ids_storage_and_live_trials_on_a_sqlite_storage(url):
    storage = open_storage(StorageSettings(url))
    study = optuna.create_study(study_name="s", storage=storage)
    asked = study.ask()
    study_id = storage.get_study_id_from_name("s")
    (stored,) = storage.get_all_trials(study_id)
    assert trial_id_of(asked) == trial_id_of(stored)
    assert storage_of(study).get_trial(trial_id_of(asked)).number == asked.number == stored.number

    live = trial_for_id(study, trial_id_of(stored))
    assert live.number == stored.number
    assert live.suggest_float("lr", 1e-4, 1e-2, log=True) > 0
    study.tell(live, 3.0)
    assert storage.get_trial(trial_id_of(stored)).state == TrialState.COMPLETE
    assert storage.get_trial(trial_id_of(stored)).value == 3.0
    storage.engine.dispose()


def test_the_outage_tolerant_storage_wraps_the_private_methods_optuna_calls_and_no_others():
    wrapped = {name for name, member in vars(outage_tolerant_storage()).items() if callable(member)}
    base = optuna.storages.RDBStorage
    private = {name for name in vars(base) if name.startswith("_")}
    assert wrapped & private == STORAGE_METHODS_CALLED_BY_OPTUNA
    assert {name for name, member in vars(base).items() if callable(member) and not name.startswith("_")} <= wrapped


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_optuna_calls_the_wrapped_private_methods_through_the_wrapper(url):
    """Optuna's own cache and fail_stale_trials reach the storage through these methods:
    a wrapper that missed them would leave those calls without outage retries."""
    called = []

    def recorded(method, name):
        def call(self, *args, **kwargs):
            called.append(name)
            return method(self, *args, **kwargs)

        return call

    storage = wrapped_rdb_storage("Recorded", recorded)(url, heartbeat_interval=10, grace_period=60)
    study = optuna.create_study(study_name="s", storage=storage)
    study.enqueue_trial({"lr": 1e-3})
    trial = study.ask()
    trial.suggest_float("lr", 1e-4, 1e-2, log=True)
    study.tell(trial, 1.0)
    assert study.best_trial.value == 1.0
    optuna.storages.fail_stale_trials(study)
    assert STORAGE_METHODS_CALLED_BY_OPTUNA <= set(called)
    storage.engine.dispose()


def test_every_private_storage_method_optuna_calls_outside_its_rdb_module_is_wrapped():
    """A new Optuna that calls another private RDBStorage method from its cache or heartbeat
    would bypass the outage retries: this reads the installed Optuna's source for such calls."""
    root = Path(optuna.__file__).parent
    private = {name for name in vars(optuna.storages.RDBStorage) if name.startswith("_") and not name.startswith("__")}
    call = re.compile(r"(?:\bstorage|_storage|_backend)\.(_[a-z]\w*)\(")
    found: dict[str, list[str]] = {}
    for path in root.rglob("*.py"):
        where = path.relative_to(root).as_posix()
        if where.startswith(("storages/_rdb/", "testing/")):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in call.findall(line):
                if name in private:
                    found.setdefault(name, []).append(f"optuna/{where}:{number}")
    unwrapped = {name: lines for name, lines in found.items() if name not in STORAGE_METHODS_CALLED_BY_OPTUNA}
    assert not unwrapped, (
        f"Optuna {optuna.__version__} calls private RDBStorage methods the adapter does not wrap: {unwrapped}"
    )
    assert found, "the scan found no call at all: its pattern no longer fits Optuna's source"


# -- a missing private name is refused by name ---------------------------------------------


def _remove(monkeypatch, owner: str, name: str) -> None:
    """Fault injection on the real class: the method is deleted, or the attribute an
    instance gets in its constructor is renamed."""
    cls = OWNERS[owner]
    if name in vars(cls):
        monkeypatch.delattr(cls, name)
        return
    init = cls.__init__

    def renamed(self, *args, **kwargs):
        init(self, *args, **kwargs)
        setattr(self, f"{name}_renamed", self.__dict__.pop(name))

    monkeypatch.setattr(cls, "__init__", renamed)


@pytest.mark.parametrize("private", PRIVATE_NAMES, ids=str)
def test_a_missing_private_name_is_named_with_the_version_and_the_range(monkeypatch, private):
    _remove(monkeypatch, private.owner, private.name)
    with pytest.raises(UnsupportedOptuna) as raised:
        check_private_api()
    message = str(raised.value)
    assert f"{private.owner}.{private.name} ({private.use})" in message
    assert f"Optuna {optuna.__version__} lacks" in message
    assert f"optuna{SUPPORTED_OPTUNA}" in message
    assert "\n" not in message


def test_open_storage_refuses_an_optuna_without_them_before_creating_the_file(monkeypatch, tmp_path):
    monkeypatch.delattr(optuna.storages.RDBStorage, "_get_trials")
    with pytest.raises(UnsupportedOptuna, match=r"optuna\.storages\.RDBStorage\._get_trials"):
        open_storage(StorageSettings(f"sqlite:///{tmp_path / 'optuna.db'}"))
    assert not (tmp_path / "optuna.db").exists()


# -- nothing else in cem_ablate uses them ----------------------------------------------------


def private_name_uses(path: Path, names: set[str]) -> list[str]:
    """file:line of each `x.<name>` (x not `self`: our own objects' attributes are ours)
    and each string "<name>" (getattr, a list of method names) in one source file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(PACKAGE.parent)
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                uses.append(f"{where}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in names:
            uses.append(f"{where}:{node.lineno}: {node.value!r}")
    return uses


def test_optunas_private_names_appear_in_the_adapter_only():
    names = {private.name for private in PRIVATE_NAMES}
    here = Path(__file__).resolve()  # this file names them to take them away (fault injection)
    sources = [
        *PACKAGE.rglob("*.py"),
        *(PACKAGE.parent / "tests").rglob("*.py"),
        *(PACKAGE.parent / "scripts").rglob("*.py"),
    ]
    elsewhere = [
        use
        for path in sorted(sources)
        if path.resolve() not in (ADAPTER, here)
        for use in private_name_uses(path, names)
    ]
    assert not elsewhere, (
        "Optuna's private names belong in cem_ablate/study/optuna_storage.py "
        "(call its storage_of, trial_id_of, trial_for_id):\n" + "\n".join(elsewhere)
    )
    assert {use.rsplit(" ", 1)[1].strip(".'") for use in private_name_uses(ADAPTER, names)} == names
