"""A campaign's studies opened as one queue (`cem-ablate study FILE FILE ...`, `study.campaign`).

`CampaignSession` holds one `StudySession` per study and offers the coordinator and the
workers what they read of a single one: its slots in one queue (`queue`, in tiers: a
campaign's proxies first), the Optuna studies of every variant (`trials`, keyed
`<study>/<variant key>`), prepare, publish, sequential seeds. Each study keeps its own Optuna
studies, MLflow experiment and run folders, so `cem-ablate report` reads each file as if it
had run alone.

A trial several studies ask for (one trial key) is trained once: the first study in queue
order owns it; the others leave their slot queued while the owner's is queued or running
(`waits`), then claim it and find it finished (trial reuse, `study.reuse`, read again for
these keys: `StudySession.shared_keys`). Without reuse (`--no-reuse`) every study trains its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cem_ablate.config.identity import digest
from cem_ablate.config.trial_status import FINAL_STATES
from cem_ablate.study.session import StudySession
from cem_ablate.study.session_protocols import QueueSession, TrialSession
from cem_ablate.study.settings import StudySettings
from cem_ablate.study.trials import VariantTrials, trial_slots
from cem_ablate.study.variants import ExpandedStudy, Variant, optuna_study_name

if TYPE_CHECKING:
    from cem_ablate.study.summary import StudyPublisher


@dataclass(frozen=True)
class Campaign:
    """Several expanded studies run as one queue, in tiers (an earlier tier is claimed first)."""

    name: str  # names the coordinator's folder under --workdir (logs, worker payload)
    tiers: list[list[ExpandedStudy]]

    @property
    def studies(self) -> list[ExpandedStudy]:
        return [e for tier in self.tiers for e in tier]

    @property
    def study_hash(self) -> str:
        return digest([e.study_hash for e in self.studies])


def open_session(
    expanded: ExpandedStudy | Campaign, settings: StudySettings, worker_index: int = 0
) -> QueueSession[StudyPublisher] | QueueSession[CampaignPublisher]:
    """A session over a study or a campaign (a worker payload holds either)."""
    if isinstance(expanded, Campaign):
        return CampaignSession(expanded, settings, worker_index)
    return StudySession(expanded, settings, worker_index)


class CampaignPublisher:
    """Each study's own publisher (its parents, verdicts, Holm family), called together."""

    def __init__(self, sessions: list[StudySession]) -> None:
        self.publishers = [s.publisher() for s in sessions]

    def publish(self) -> None:
        for publisher in self.publishers:
            publisher.publish()


class CampaignSession:
    def __init__(self, campaign: Campaign, settings: StudySettings, worker_index: int = 0) -> None:
        self.expanded = campaign  # what a worker payload holds
        self.settings = settings
        self.sessions: list[StudySession] = []
        self._tiers: list[list[StudySession]] = []
        for tier in campaign.tiers:
            self._tiers.append([StudySession(e, settings, worker_index) for e in tier])
            self.sessions += self._tiers[-1]
        self.variants: list[Variant] = []  # every study's, named and keyed by study (progress lines)
        self.trials: dict[str, VariantTrials] = {}
        for s in self.sessions:
            for v in s.variants:
                key = optuna_study_name(s.spec.name, v)
                self.variants.append(dataclasses.replace(v, key=key, name=f"{s.spec.name}: {v.name}"))
                self.trials[key] = s.trials[v.key]
        self._owners = _owners(self.queue()) if settings.reuse else {}
        shared = frozenset(key for key, _ in self._owners.values())
        for s in self.sessions:
            s.shared_keys = shared

    @property
    def title(self) -> str:
        return f"campaign of {len(self.sessions)} studies ({', '.join(s.spec.name for s in self.sessions)})"

    @property
    def study_dir(self) -> Path:
        return self.settings.workdir / self.expanded.name

    def queue(self) -> list[list[tuple[StudySession, Variant]]]:
        return [[(s, v) for s in tier for v in s.variants] for tier in self._tiers]

    def waits(self, session: TrialSession, variant: Variant) -> Callable[[str], bool] | None:
        """Slot key -> whether to leave it queued: another study owns its trial and has it
        queued or running (a slot of the owner's not yet active, a sequential seed, never holds
        anyone back: the first to need the trial trains it)."""
        name = session.spec.name

        def waits(slot: str) -> bool:
            owned = self._owners.get((name, variant.key, slot))
            if owned is None:
                return False
            _, (owner, owner_variant, owner_slot) = owned
            state = owner.trials[owner_variant.key].slot_states().get(owner_slot)
            return state is not None and state not in FINAL_STATES

        return waits

    def prepare(self, echo: Callable[[str], object] = print) -> None:
        for s in self.sessions:
            s.prepare(echo)

    def publisher(self) -> CampaignPublisher:
        return CampaignPublisher(self.sessions)

    def add_seeds(self, publisher: CampaignPublisher) -> list[str]:
        return [
            f"{s.spec.name}: {line}" for s, p in zip(self.sessions, publisher.publishers) for line in s.add_seeds(p)
        ]

    def close(self) -> None:
        for s in self.sessions:
            s.close()


def _owners(
    queue: list[list[tuple[StudySession, Variant]]],
) -> dict[tuple[str, str, str], tuple[str, tuple[StudySession, Variant, str]]]:
    """(study, variant key, slot key) -> (trial key, (owning session, its variant, its slot key))
    for every slot whose trial an earlier slot in queue order asks for too (every seed a
    study may train, sequential ones included)."""
    first: dict[str, tuple[StudySession, Variant, str]] = {}
    out: dict[tuple[str, str, str], tuple[str, tuple[StudySession, Variant, str]]] = {}
    for tier in queue:
        for session, variant in tier:
            for slot in trial_slots(variant.lr_search(session.spec.lr_search), list(session.spec.seeds)):
                # A sampled slot has no lr until its trial starts: its key stands for the seed alone.
                key = variant.trial_key(slot.lr, slot.seed)  # type: ignore[arg-type]
                here = (session, variant, slot.key)
                owner = first.setdefault(key, here)
                if owner is not here:
                    out[(session.spec.name, variant.key, slot.key)] = (key, owner)
    return out
