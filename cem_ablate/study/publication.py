"""What a variant publishes on its parent run: one frozen record, one writer, one reader.

    stats.json = VariantStatistics.to_dict() | {"pairing": {baseline: {"paired", "reason"}},
                                                "design": {"looks", "tests_per_look", "alpha", "correction"}}

The coordinator's publisher (`study.summary`) builds a `VariantPublication` and writes
it with `to_stats()` (the artifact's shape is unchanged, so every stored study reads
the same); the report reads each variant's artifact into one with `from_stats()` once
(`publications`) and every section reads that. Stores written before
pairing (or the design) was recorded give `pairing_recorded` False (or `design` None).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cem_ablate.analysis.statistics import VariantStatistics

if TYPE_CHECKING:
    from cem_ablate.tracking.readback import VariantRecord


@dataclass(frozen=True)
class PairingRecord:
    paired: bool
    reason: str = ""


@dataclass(frozen=True)
class VariantPublication:
    statistics: VariantStatistics
    pairing: Mapping[str, PairingRecord] = field(default_factory=dict)  # baseline name -> how it was compared
    design: Mapping[str, Any] | None = None  # study.verdicts.design_record
    pairing_recorded: bool = True

    def to_stats(self) -> dict:
        """The stats.json mapping (the one writer's shape)."""
        out = self.statistics.to_dict()
        out["pairing"] = {name: {"paired": p.paired, "reason": p.reason} for name, p in self.pairing.items()}
        if self.design is not None:
            out["design"] = dict(self.design)
        return out

    @classmethod
    def from_stats(cls, data: Mapping | None) -> VariantPublication | None:
        """The one reader (None: nothing published yet)."""
        if not data:
            return None
        stored = data.get("pairing")
        pairing = {
            name: PairingRecord(bool(p["paired"]), str(p.get("reason", ""))) for name, p in (stored or {}).items()
        }
        return cls(VariantStatistics.from_dict(dict(data)), pairing, data.get("design"), stored is not None)


def publications(records: Iterable[VariantRecord]) -> dict[str, VariantPublication | None]:
    """Variant key -> its published record, each parent's stats.json parsed once
    (`records`: `tracking.readback.VariantRecord`s); every part of a report reads this."""
    return {r.key: VariantPublication.from_stats(r.stats) for r in records}
