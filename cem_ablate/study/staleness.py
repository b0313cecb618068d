"""Why stale trials are stale: what changed since they were trained, from what they recorded.

A stale trial (study/trials.py) finished under another trial key than its lr and seed
have now. Each trial records the code part of its key and the per-module digests it
came from (study/ledger.py: `code_fingerprint`, `code_parts`); beside the fingerprint
the current code gives its variant (config/fingerprint.py) they say why: the modules
whose digests differ, or, where the code is the same, the rest of the key (the data or
the platform version). The run's retrain line (study/session.py) and the dry run's
(cli/study_command.py) both read it here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cem_ablate.config.fingerprint import CodeFingerprint
from cem_ablate.study.ledger import TrialFacts

UNRECORDED = "unrecorded"  # the code fingerprint of a trial that recorded none
SHOWN_FILES = 4  # files named in a line; the rest are counted


@dataclass(frozen=True)
class StaleCause:
    old: frozenset[str]  # the code fingerprints the stale trials recorded
    new: frozenset[str]  # the current code's, for their variants
    files: tuple[str, ...]  # the modules whose digests differ (of the trials that recorded theirs)

    @property
    def code_changed(self) -> bool:
        return self.old != self.new

    def where(self) -> str:
        """The changed modules, at most `SHOWN_FILES` named; "" when none are known."""
        shown = ", ".join(self.files[:SHOWN_FILES])
        more = len(self.files) - SHOWN_FILES
        return shown + (f" (+{more} more)" if more > 0 else "")


def stale_cause(trials: Iterable[tuple[CodeFingerprint, TrialFacts]]) -> StaleCause:
    """What changed for `trials`: (the current code fingerprint of its variant, its facts)."""
    old, new, files = set(), set(), set()
    for current, facts in trials:
        new.add(current.digest)
        old.add(facts.code_fingerprint or UNRECORDED)
        if facts.code_parts is not None:
            files.update(current.changed_parts(dict(facts.code_parts)))
    return StaleCause(frozenset(old), frozenset(new), tuple(sorted(files)))
