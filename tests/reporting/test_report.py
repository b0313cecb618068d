"""The report from logged statistics: metric named, verdict columns, scaling section."""

import numpy as np
import pytest

from cem_ablate.analysis.scaling import has_size_axis, summarize_scaling
from cem_ablate.analysis.statistics import Observation, VariantStatistics, variant_stats
from cem_ablate.config.trial_record import TrialRecord
from cem_ablate.reporting.report import build_comparisons, build_rows, row_cells, scaling_inputs, write_report
from cem_ablate.reporting.seed_report import comparison_cells
from cem_ablate.tracking.readback import VariantRecord

SIZES = {"1": 2e6, "2": 4e6, "3": 8e6, "4": 16e6}


def record(family, size, objective, baseline_key=None, metric="test RMSE"):
    n = SIZES[size]
    obs = [
        Observation(lr, s, objective + 0.3 * (np.log2(lr) + 10) ** 2 + 0.01 * s)
        for lr in (5e-4, 1e-3, 2e-3)
        for s in range(3)
    ]
    stats = variant_stats(obs, n_resamples=200)
    key = f"{family}-{size}"
    trials = [
        TrialRecord(o.lr, o.seed, "finished", o.value, run_id=f"r{i}", trial_key=f"{key}/{i}")
        for i, o in enumerate(obs)
    ]
    rec = VariantRecord(
        key,
        key,
        f"{family},n_layers={size}",
        "variant" if baseline_key else "baseline",
        "done",
        {"variant": family, "model.n_layers": size},
        {"llama": baseline_key} if baseline_key else {},
        {"params_total": n, "tokens_per_trial": 1e6, "train_flops_per_token": 6 * n},
        None,
        trials=trials,
    )
    return rec, stats


def study(metric="test RMSE"):
    records = []
    for size, n in SIZES.items():
        base, bs = record("llama", size, 10 * (n / 1e6) ** -0.3 + 2, metric=metric)
        var, vs = record("cem", size, 10 * (n / 0.85 / 1e6) ** -0.3 + 2, base.key, metric=metric)
        base.stats = VariantStatistics(metric, bs, {}).to_dict()
        var.stats = VariantStatistics(metric, vs, {}).to_dict() | {"pairing": {"llama": {"paired": True, "reason": ""}}}
        records += [base, var]
    return records


def comparison_table(records):
    return {
        (c.variant, c.baseline, c.test.at): comparison_cells(c.variant, c.baseline, c.test)
        for c in build_comparisons(records).rows
    }


def test_report_names_the_metric_and_shows_verdicts_and_scaling(tmp_path):
    records = study()
    rows = build_rows(records)
    cells = dict(zip([r.name for r in rows], [row_cells(r) for r in rows]))
    assert cells["llama,n_layers=1"][0] == "llama,n_layers=1 (baseline)"
    table = comparison_table(records)
    # lower RMSE at every seed, paired: 4 comparisons (one per size), all at the same grid point
    assert len(table) == 4 and all(c[-1] == "better" and c[4] == "paired t" for c in table.values())
    inputs = scaling_inputs(records)
    assert has_size_axis(inputs) and {i.family for i in inputs} == {"llama", "cem"}
    summary = summarize_scaling(inputs, n_resamples=100)
    path = write_report(records, "scaling_check", tmp_path, summary)
    text = path.read_text()
    assert "test RMSE at lr* [95%]" in text and "perplexity" not in text and "ppl*" not in text
    assert "## Scaling" in text and "matches llama at 0.85× the parameters" in text
    assert "| better |" in text and "4 comparisons, one family" in text and "Holm-adjusted" in text
    assert (tmp_path / "scaling.png").stat().st_size > 10_000
    for name in ("ppl_vs_params", "ppl_vs_lr", "scaling"):  # an SVG beside every PNG, linked from report.md
        assert (tmp_path / f"{name}.svg").read_text().lstrip().startswith("<?xml")
        assert f"[SVG]({name}.svg)" in text


def test_a_variant_with_two_baselines_gets_a_paired_row_against_each(tmp_path):
    # Fig. 4's layout: T = 2 is compared with Llama and with the same layer at T = 1.
    llama, ls = record("llama", "1", 10.0, metric="test perplexity")
    t1, s1 = record("cem_T1", "1", 10.5, llama.key, metric="test perplexity")
    t2, s2 = record("cem_T2", "1", 11.0, llama.key, metric="test perplexity")
    t2.baselines = {"llama": llama.key, "T1": t1.key}
    llama.stats = VariantStatistics("test perplexity", ls, {}).to_dict()
    t1.stats = VariantStatistics("test perplexity", s1, {}).to_dict()  # no pairing recorded: Welch
    t2.stats = VariantStatistics("test perplexity", s2, {}).to_dict() | {
        "pairing": {"llama": {"paired": False, "reason": ""}, "T1": {"paired": True, "reason": ""}}
    }
    records = [llama, t1, t2]
    table = comparison_table(records)
    vs_llama, vs_t1 = table[(t2.name, llama.name, "baseline lr*")], table[(t2.name, t1.name, "baseline lr*")]
    assert vs_llama[3].startswith("+1") and vs_llama[4] == "Welch t" and vs_llama[5] == "3 vs 3"
    assert vs_t1[3].startswith("+0.5") and vs_t1[4] == "paired t" and vs_t1[5] == "3 pairs"
    assert vs_t1[-1] == "worse"  # +0.5 at every seed, paired
    comparisons = build_comparisons(records)
    assert comparisons.notes and "Welch for" in comparisons.notes[0] and t1.name in comparisons.notes[0]
    text = write_report(records, "two_baselines", tmp_path).read_text()
    per_lr = text.split("per learning rate")[1].split("## ")[0]
    assert per_lr.count(f"| {t2.name} |") == 3  # three learning rates, listed once, not once per baseline
    family = text.split("comparisons, one family")[1].split("## ")[0]
    assert family.count(f"| {t2.name} | {llama.name} |") == 1 and family.count(f"| {t2.name} | {t1.name} |") == 1
    main_table = text.split("## ")[0]
    assert main_table.count(f"| {t2.name} |") == 1
    assert text.index("comparisons, one family") < text.index("mean ± std over seeds")


def test_holm_over_the_report_and_the_verdict_follow_the_adjusted_p():
    # Four comparisons whose raw p straddle α: Holm by hand, verdicts from the adjusted p.
    from scipy import stats as st

    llama, ls = record("llama", "1", 10.0, metric="test perplexity")
    llama.stats = VariantStatistics("test perplexity", ls, {}).to_dict()
    records = [llama]
    for i, shift in enumerate((0.02, 0.05, 0.5, -0.004)):
        rec, _ = record(f"v{i}", "1", 10.0, llama.key, metric="test perplexity")
        noise = [0.0, 0.04, -0.03][:3]
        obs = [Observation(t.lr, t.seed, t.value + shift + noise[t.seed]) for t in llama.trials]
        vs = variant_stats(obs, n_resamples=0)
        rec.stats = VariantStatistics("test perplexity", vs, {}).to_dict() | {
            "pairing": {"llama": {"paired": True, "reason": ""}}
        }
        records.append(rec)
    comparisons = build_comparisons(records)
    ps = [c.test.decision.p for c in comparisons.rows]
    for c in comparisons.rows:
        lr = c.test.lr_variant
        v = [
            o
            for o in VariantStatistics.from_dict(next(r for r in records if r.name == c.variant).stats)
            .stats.at(lr)
            .values
        ]
        b = list(ls.at(lr).values)
        assert c.test.decision.p == pytest.approx(st.ttest_rel(v, b).pvalue, rel=1e-9)
    order = np.argsort(ps)
    m = len(ps)
    holm = np.minimum(1, np.maximum.accumulate([(m - i) * ps[j] for i, j in enumerate(order)]))
    expected = dict(zip(order, holm))
    for i, c in enumerate(comparisons.rows):
        assert c.test.decision.p_holm == pytest.approx(expected[i], rel=1e-9)
        assert c.test.decision.resolved == (expected[i] <= 0.05)


def test_correction_none_tests_each_comparison_at_alpha_alone():
    from types import SimpleNamespace

    from cem_ablate.study.spec import StatisticsConfig

    records = study()
    holm = build_comparisons(records)
    spec = SimpleNamespace(seeds=[0, 1, 2], statistics=StatisticsConfig(alpha=0.05, correction="none"))
    plain = build_comparisons(records, spec)
    assert [c.test.decision.p_holm for c in plain.rows] == [c.test.decision.p for c in plain.rows]
    assert all(h.test.decision.p_holm >= p.test.decision.p_holm for h, p in zip(holm.rows, plain.rows))
    assert "not adjusted for the report's 4 tested comparison(s) (statistics.correction: none)" in plain.definition(
        "test RMSE"
    )
    assert "Holm-adjusted over the report's 4 tested comparison(s) (one family)" in holm.definition("test RMSE")


def test_a_comparison_without_seeds_is_said_apart_from_holms_family():
    # the variant has no finished trial at the baseline's lr* grid point (1e-3: diverged there)
    records = study()[:2]
    base, var = records
    kept = [t for t in var.trials if t.lr != 1e-3]
    obs = [Observation(t.lr, t.seed, t.value) for t in kept]
    var.trials = kept
    var.stats = VariantStatistics("test RMSE", variant_stats(obs, n_resamples=200), {}).to_dict() | {
        "pairing": {"llama": {"paired": True, "reason": ""}}
    }
    comparisons = build_comparisons(records)
    untested = [c for c in comparisons.rows if c.test.decision.p_design is None]
    assert len(untested) == 1 and untested[0].test.lr_baseline == 1e-3
    tested = len(comparisons.rows) - 1
    assert (
        f"Holm-adjusted over the report's {tested} tested comparison(s) (one family; 1 more without a "
        "test (too few seeds), unresolved)"
    ) in comparisons.definition("test RMSE")


def test_a_store_without_recorded_pairing_is_paired_by_the_study_file():
    # A study run before pairing was recorded (its stats.json has none): with the study
    # file the report checks the pairs on its variants; without it, Welch and a note.
    import copy

    from cem_ablate.reporting.report import _missing_pairings
    from cem_ablate.study.spec import parse_study
    from cem_ablate.study.variants import expand
    from tests.study.tiny_study import TINY_BASE

    mapping = {
        "name": "old",
        "base": copy.deepcopy(TINY_BASE),
        "variants": [{"name": "T2", "set": {"model.attention": {"name": "cem", "steps": 2}}}],
        "baselines": {"T1": {"model.attention": {"name": "cem", "steps": 1}}},
    }
    expanded = expand(parse_study(mapping), mapping)
    t2, t1 = expanded.variants
    base, bs = record("cem_T1", "1", 10.0, metric="test perplexity")
    var, vs = record("cem_T2", "1", 10.5, base.key, metric="test perplexity")
    base.key, var.key, var.baselines = t1.key, t2.key, {"T1": t1.key}
    base.stats = VariantStatistics("test perplexity", bs, {}).to_dict()
    var.stats = VariantStatistics("test perplexity", vs, {}).to_dict()
    pairings = _missing_pairings([base, var], expanded)
    assert pairings[(t2.key, "T1")].paired  # T = 2 vs T = 1 of one layer: the same initial weights
    comparisons = build_comparisons([base, var], expanded.spec, pairings)
    assert {c.test.decision.test for c in comparisons.rows} == {"paired t"} and not comparisons.notes
    assert build_comparisons([base, var]).notes  # without the file: Welch, and the report says so
    var.stats["pairing"] = {"T1": {"paired": True, "reason": ""}}
    assert _missing_pairings([base, var], expanded) is None  # recorded: no models built


def test_verdicts_without_an_estimated_lr_star_are_marked(tmp_path):
    """A comparison whose variant or baseline finished at fewer than three learning rates
    gets one note (on the terminal and in report.md); one with three on both sides none."""
    records = study()[:2]  # llama and cem at size 1, three learning rates each
    assert build_comparisons(records).notes == []
    base, var = records
    var_stats = VariantStatistics.from_dict(var.stats)
    kept = [o for o in var.trials if o.lr == 1e-3]
    one_lr = variant_stats([Observation(t.lr, t.seed, t.value) for t in kept], n_resamples=50)
    var.trials = kept
    var.stats = VariantStatistics(var_stats.objective, one_lr, {}).to_dict() | {"pairing": var.stats["pairing"]}
    notes = build_comparisons([base, var]).notes
    assert notes == [
        "the verdict of cem,n_layers=1 vs llama,n_layers=1 rests on no estimated lr* "
        "(cem,n_layers=1: 1 learning rate; an lr* needs at least 3): it compares them at a fixed "
        "learning rate, not at their tuned optima."
    ]
    text = write_report([base, var], "one_lr", tmp_path, None).read_text()
    assert f"Note: {notes[0]}" in text
