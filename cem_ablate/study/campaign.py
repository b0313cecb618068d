"""Several study files as one campaign: every distinct trial counted, priced and trained once.

    cem-ablate study studies/fig2a_cem_attention.yaml studies/fig2b_cem_mlp.yaml --scale transfer --dry-run

A trial's identity across files is its trial key (`RunConfig.trial_key()`: the model that is
built, lr, seed, data, code), so a Llama baseline that eight figure files name is one trial per
learning rate and seed, and a proxy that four sizes share (one model once the sizes' dims are
overridden alike, `ModelConfig.identity_mapping`) is tuned once. A transfer target trains at
its proxy's lr*, known only once the proxy ran: its identity is its trial key at the grid's
first rate together with its proxy's trial keys (the same proxy trials give the same lr*).

Cost (`CampaignPlan`): each distinct trial's training FLOPs (`study.estimates`) once, beside
the files priced alone (each file's own dry run, which counts a shared trial in every file).
With sequential seeds (`seeds: {min, max, until: resolved}`, `study.sequential`) a trial at
seed s >= min trains only if a comparison it takes part in is still unresolved after s seeds:
the worst case trains every seed up to max; the expected case weights each such trial by
the probability that some comparison of its variant asks for it, 1 - prod F(s) over the
comparisons (F: the design's own simulated stopping distribution at a stated Δ,
`analysis.power.stopping_seeds`, comparisons taken as independent). Every design other than `FIXED_REFERENCE_SEEDS` fixed seeds
of the two sides' own variance (sequential, or `statistics.variance: pooled`) is printed beside
that reference: its simulated false-positive rate and power, a pooled design's over as many
points as its file compares (one per variant: a transfer target trains at one rate).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cem_ablate.config import ConfigError
from cem_ablate.config.identity import digest
from cem_ablate.study.spec import SequentialSeeds, StudySpec
from cem_ablate.study.variants import ExpandedStudy, Variant

if TYPE_CHECKING:
    from cem_ablate.analysis.decision import Design
    from cem_ablate.study.trials import Slot

FIXED_REFERENCE_SEEDS = 3  # the calibrated design a sequential one is held against (docs/reproducing.md)
ROLES = ("proxy", "grid", "target", "ladder")  # the order a campaign queues them in: proxies first


@dataclass(frozen=True)
class AskedTrial:
    """One trial a study file asks for."""

    identity: str  # its trial key; a transfer target's: see the module docstring
    variant: Variant
    seed: int
    role: str  # "proxy", "grid", "target" (at its proxy's lr*) or "ladder" (a forecast's width, likewise)


@dataclass(frozen=True)
class CampaignFile:
    label: str  # the study file's path, as given
    expanded: ExpandedStudy

    @property
    def name(self) -> str:
        return self.expanded.spec.name


def transfer_target_identity(variant: Variant, seed: int, proxy_keys: Sequence[str], first_lr: float) -> str:
    """A transfer target's identity before its lr is known: its trial key at `first_lr` (any
    fixed rate: the variant, seed, data and code) with its proxy's trial keys (which fix lr*)."""
    return digest({"target": variant.trial_key(first_lr, seed), "proxy": sorted(proxy_keys)})


def _grid_lr(slot: Slot) -> float:
    assert slot.lr is not None  # a grid slot fixes its learning rate (trials.trial_slots)
    return slot.lr


def asked_trials(expanded: ExpandedStudy) -> list[AskedTrial]:
    """Every trial the study may train (sequential seeds: up to max), proxies first."""
    from cem_ablate.study.transfer import proxy_seeds
    from cem_ablate.study.trials import trial_slots

    spec = expanded.spec
    if spec.lr_search.method == "grid":
        return [
            AskedTrial(v.trial_key(_grid_lr(slot), slot.seed), v, slot.seed, "grid")
            for v in expanded.variants
            for slot in trial_slots(v.lr_search(spec.lr_search), list(spec.seeds))
        ]
    grid = spec.lr_search.grid
    out: list[AskedTrial] = []
    of_proxy: dict[str, list[str]] = {}
    for p in expanded.proxies:
        keys = [(p.trial_key(lr, seed), seed) for lr in grid for seed in proxy_seeds(expanded)]
        of_proxy[p.key] = [k for k, _ in keys]
        out += [AskedTrial(k, p, seed, "proxy") for k, seed in keys]
    role = "ladder" if spec.forecast is not None else "target"
    for v in expanded.variants:
        assert v.proxy is not None  # every variant of a transfer study has its proxy (variants._proxies)
        out += [
            AskedTrial(transfer_target_identity(v, seed, of_proxy[v.proxy], grid[0]), v, seed, role)
            for seed in spec.seeds
        ]
    return out


def check_campaign_file(expanded: ExpandedStudy, label: str) -> None:
    """A campaign keys every trial before it runs: sampled learning rates have no key yet."""
    method = expanded.spec.lr_search.method
    if method not in ("grid", "transfer"):
        raise ConfigError(
            "",
            f"{label}: lr_search method {method} draws its learning rates as it runs, so its "
            "trials have no keys to share before then; a campaign takes grid and transfer studies.",
        )


@dataclass
class CampaignTrial:
    """A distinct trial of the campaign: what it costs, who asks for it, how likely it trains."""

    identity: str
    variant: Variant
    seed: int
    role: str
    train_flops: float
    files: list[str] = field(default_factory=list)  # study names that ask for it, first = its owner
    trained: float = 1.0  # the expected case's probability that it trains (1: always)


@dataclass(frozen=True)
class SeedDesignLine:
    """One seed design of the campaign (sequential, or pooled, or another seed count) against
    `FIXED_REFERENCE_SEEDS` fixed seeds."""

    design: Design
    paired: bool
    groups: int  # the points a pooled design pools over (2: the two sides only)
    effect: float  # Δ in seed-to-seed stds the expected case is computed at
    false_positive: float
    power: float
    reference_false_positive: float
    reference_power: float
    stops: tuple[tuple[int, float], ...]  # (seed count, P(one comparison's seeds stop there)) at `effect`
    files: tuple[str, ...] = ()  # the study names with this design

    @property
    def expected_seeds(self) -> float:
        """One comparison's seeds, expected at `effect`."""
        return sum(n * p for n, p in self.stops)

    @property
    def calibrated(self) -> bool:
        """As calibrated as the reference or better, up to the simulations' noise."""
        return self.false_positive <= self.reference_false_positive + 0.005

    @property
    def meets(self) -> bool:
        """As calibrated and as powerful as the reference, or better."""
        return self.calibrated and self.power >= self.reference_power

    def text(self) -> str:
        test = "paired t" if self.paired else f"pooled t over {self.groups} points" if self.design.pooled else "Welch t"
        verdict = (
            "as calibrated and as powerful or better"
            if self.meets
            else "as calibrated but less powerful"
            if self.calibrated
            else "more false positives"
        )
        where = f"{', '.join(self.files)}: " if self.files else ""
        return (
            f"{where}seed design {self.design.describe()} ({test}): false-positive rate {self.false_positive:.3f}, "
            f"power {self.power:.3f} at Δ = {self.effect:.3g} × the seed std; {FIXED_REFERENCE_SEEDS} fixed seeds: "
            f"{self.reference_false_positive:.3f}, {self.reference_power:.3f} "
            f"({verdict}); a comparison takes "
            f"{self.expected_seeds:.2f} seeds expected at that Δ, {max(self.design.looks)} at most "
            f"(simulated, analysis.power)"
        )


@dataclass
class CampaignPlan:
    files: list[CampaignFile]
    trials: dict[str, CampaignTrial]  # identity -> the trial, in queue order
    asked: dict[str, list[AskedTrial]]  # study name -> what it asks for (its own dedup only)
    designs: list[SeedDesignLine] = field(default_factory=list)

    def file_trials(self, name: str) -> list[CampaignTrial]:
        """The distinct trials one file asks for (what it costs priced alone)."""
        seen: dict[str, CampaignTrial] = {}
        for a in self.asked[name]:
            seen.setdefault(a.identity, self.trials[a.identity])
        return list(seen.values())

    def spec(self, name: str) -> StudySpec:
        return next(f.expanded.spec for f in self.files if f.name == name)

    def owned(self, name: str) -> list[CampaignTrial]:
        """The trials this file is the first to ask for (what it adds to the campaign)."""
        return [t for t in self.trials.values() if t.files[0] == name]


def plan_campaign(
    files: list[CampaignFile], effect: float | None = None, flops_of: Callable[[Variant], float] | None = None
) -> CampaignPlan:
    """Every file's trials, each distinct one once, in queue order (proxies first, then the
    files' order); the expected case for sequential seeds at `effect` (None: the smallest Δ
    `FIXED_REFERENCE_SEEDS` fixed seeds detect with 80% power). `flops_of`: a variant's
    training FLOPs per trial (default: `study.estimates`, the engine's own resolution)."""
    flops_of = flops_of or _estimated_flops
    asked = {f.name: asked_trials(f.expanded) for f in files}
    flops: dict[str, float] = {}
    trials: dict[str, CampaignTrial] = {}
    for role in ROLES:
        for f in files:
            for a in (a for a in asked[f.name] if a.role == role):
                key = a.variant.variant_key
                if key not in flops:
                    flops[key] = flops_of(a.variant)
                trial = trials.setdefault(a.identity, CampaignTrial(a.identity, a.variant, a.seed, a.role, flops[key]))
                if f.name not in trial.files:
                    trial.files.append(f.name)
    plan = CampaignPlan(files, trials, asked)
    _expected_case(plan, effect)
    return plan


def _estimated_flops(variant: Variant) -> float:
    from cem_ablate.study.estimates import estimate

    return estimate(variant.config).train_flops


def _comparisons(files: list[CampaignFile]) -> dict[str, set[tuple]]:
    """Variant key -> the sequential comparisons (variant key, baseline key, file) it takes part in."""
    out: dict[str, set[tuple]] = {}
    for f in files:
        if not isinstance(f.expanded.spec.seeds, SequentialSeeds):
            continue
        by_key = {v.key: v for v in f.expanded.variants}
        for v in f.expanded.variants:
            for base_key in v.baselines.values():
                pair = (v.variant_key, by_key[base_key].variant_key, f.name)
                for key in pair[:2]:
                    out.setdefault(key, set()).add(pair)
    return out


def _first_seeds(spec: StudySpec) -> int:
    """How many seeds a sequential file's variants train before its first look."""
    assert isinstance(spec.seeds, SequentialSeeds)  # only a sequential file has a stopping rule (`stopping`)
    return spec.seeds.min


def _expected_case(plan: CampaignPlan, effect: float | None) -> None:
    """Each sequential trial's probability of training (module docstring); the design lines."""
    from cem_ablate.study.verdicts import design_of, pooled_points

    designs: dict[tuple, SeedDesignLine] = {}
    stopping: dict[str, dict[int, float]] = {}  # file -> its design's P(stop at n)
    for f in plan.files:
        spec = f.expanded.spec
        design = design_of(spec.seeds, spec.statistics)
        if not (design.sequential_looks or design.pooled or design.looks != (FIXED_REFERENCE_SEEDS,)):
            continue
        paired = spec.lr_search.method == "grid"  # a transfer target's pairs are at two lrs: unpaired
        groups = pooled_points(f.expanded.variants) if design.pooled and not paired else 2
        line = designs.get((design, paired, groups))
        if line is None:
            line = seed_design_line(design, paired, effect, groups)
        designs[(design, paired, groups)] = dataclasses.replace(line, files=(*line.files, f.name))
        if isinstance(spec.seeds, SequentialSeeds):
            stopping[f.name] = dict(line.stops)
    plan.designs = list(designs.values())
    if not stopping:
        return
    comparisons = _comparisons(plan.files)
    for trial in plan.trials.values():
        sequential = [name for name in trial.files if name in stopping]
        if trial.role == "proxy" or len(sequential) < len(trial.files):
            continue  # proxies, and trials a fixed-seed file asks for, always train
        if trial.seed < min(_first_seeds(plan.spec(name)) for name in sequential):
            continue
        unstopped = [
            sum(p for n, p in stopping[pair[2]].items() if n <= trial.seed)
            for pair in comparisons.get(trial.variant.variant_key, ())
        ]
        trial.trained = 1.0 - math.prod(unstopped)


def seed_design_line(design: Design, paired: bool, effect: float | None = None, groups: int = 2) -> SeedDesignLine:
    """A design's error rates and expected seeds beside `FIXED_REFERENCE_SEEDS` fixed seeds' of the
    two sides' own variance at α 0.05 (the calibration the campaign is held to), at `effect` (None:
    the Δ the fixed seeds detect with 80% power), simulated; `groups`: a pooled design's points."""
    from cem_ablate.analysis.decision import ALPHA, Design
    from cem_ablate.analysis.power import false_positive_rate, min_detectable_effect, power, stopping_seeds

    reference = Design.fixed(FIXED_REFERENCE_SEEDS, ALPHA)
    if effect is None:
        effect = min_detectable_effect(reference, 0.8, paired)
        assert effect is not None  # FIXED_REFERENCE_SEEDS fixed seeds test, and reach 80% power at some Δ
    stops = stopping_seeds(design, effect, paired, groups=groups)
    return SeedDesignLine(
        design,
        paired,
        groups,
        effect,
        false_positive_rate(design, paired, groups=groups),
        power(design, effect, paired, groups=groups),
        false_positive_rate(reference, paired),
        power(reference, effect, paired),
        tuple(sorted(stops.items())),
    )
