"""The report from logged statistics: metric named, verdict columns, scaling section."""

import numpy as np

from cem_ablate.analysis.scaling import has_size_axis, summarize_scaling
from cem_ablate.analysis.statistics import Observation, VariantStatistics, compare, variant_stats
from cem_ablate.study.report import build_rows, row_cells, scaling_inputs, write_report
from cem_ablate.tracking.readback import TrialRecord, VariantRecord

SIZES = {"1": 2e6, "2": 4e6, "3": 8e6, "4": 16e6}


def record(family, size, objective, baseline_key=None, metric="test RMSE"):
    n = SIZES[size]
    obs = [Observation(lr, s, objective + 0.3 * (np.log2(lr) + 10) ** 2 + 0.01 * s) for lr in (5e-4, 1e-3, 2e-3)
           for s in range(3)]
    stats = variant_stats(obs, n_resamples=200)
    key = f"{family}-{size}"
    trials = [TrialRecord(f"r{i}", f"{key}/{i}", o.lr, o.seed, "finished", o.value) for i, o in enumerate(obs)]
    rec = VariantRecord(key, key, f"{family},n_layers={size}", "variant" if baseline_key else "baseline", "done",
                        {"variant": family, "model.n_layers": size}, {"llama": baseline_key} if baseline_key else {},
                        {"params_total": n, "tokens_per_trial": 1e6, "train_flops_per_token": 6 * n}, None,
                        trials=trials)
    return rec, stats


def study(metric="test RMSE"):
    records, stats = [], {}
    for size, n in SIZES.items():
        base, bs = record("llama", size, 10 * (n / 1e6) ** -0.3 + 2, metric=metric)
        var, vs = record("cem", size, 10 * (n / 0.85 / 1e6) ** -0.3 + 2, base.key, metric=metric)
        base.stats = VariantStatistics(metric, bs, {}).to_dict()
        var.stats = VariantStatistics(metric, vs, {"llama": compare(vs, bs)}).to_dict()
        records += [base, var]
    return records


def test_report_names_the_metric_and_shows_verdicts_and_scaling(tmp_path):
    records = study()
    rows = build_rows(records)
    cells = dict(zip([r.name for r in rows], [row_cells(r) for r in rows]))
    assert cells["cem,n_layers=1"][6] == "better"  # lower RMSE at every seed
    assert cells["llama,n_layers=1"][5] == "(baseline)"
    inputs = scaling_inputs(records)
    assert has_size_axis(inputs) and {i.family for i in inputs} == {"llama", "cem"}
    summary = summarize_scaling(inputs, n_resamples=100)
    path = write_report(records, "scaling_check", tmp_path, summary)
    text = path.read_text()
    assert "test RMSE at lr* [95%]" in text and "perplexity" not in text and "ppl*" not in text
    assert "## Scaling" in text and "matches llama at 0.85× the parameters" in text
    assert "| better |" in text or "| better" in text
    assert (tmp_path / "scaling.png").stat().st_size > 10_000


def test_a_variant_with_two_baselines_gets_a_paired_row_against_each(tmp_path):
    # Fig. 4's layout: T = 2 is compared with Llama and with the same layer at T = 1.
    llama, ls = record("llama", "1", 10.0, metric="test perplexity")
    t1, s1 = record("cem_T1", "1", 10.5, llama.key, metric="test perplexity")
    t2, s2 = record("cem_T2", "1", 11.0, llama.key, metric="test perplexity")
    t2.baselines = {"llama": llama.key, "T1": t1.key}
    llama.stats = VariantStatistics("test perplexity", ls, {}).to_dict()
    t1.stats = VariantStatistics("test perplexity", s1, {"llama": compare(s1, ls)}).to_dict()
    t2.stats = VariantStatistics("test perplexity", s2, {"llama": compare(s2, ls), "T1": compare(s2, s1)}).to_dict()
    rows = build_rows([llama, t1, t2])
    cem_t2 = [(r.baseline, row_cells(r)) for r in rows if r.name == t2.name]
    assert [b for b, _ in cem_t2] == [llama.name, t1.name]
    (_, vs_llama), (_, vs_t1) = cem_t2
    assert vs_llama[5].startswith("+1") and vs_t1[5].startswith("+0.5") and vs_t1[6] == "worse"
    assert vs_t1[3] == vs_llama[3]  # the same variant's optimum on both rows
    text = write_report([llama, t1, t2], "two_baselines", tmp_path).read_text()
    per_lr = text.split("per learning rate")[1].split("## ")[0]
    assert per_lr.count(f"| {t2.name} |") == 3  # three learning rates, listed once, not once per baseline
    optima = text.split("## Δ of the optima")[1].split("## ")[0]
    assert optima.count(f"| {t2.name} | {llama.name} |") == 1 and optima.count(f"| {t2.name} | {t1.name} |") == 1
    main_table = text.split("## ")[0]
    assert text.index("mean ± std over seeds") < text.index("## Δ of the optima")  # the first two tables stay put
    assert main_table.count(f"| {t2.name} |") == 1 and main_table.count(f"| {t2.name} (vs {t1.name}) |") == 1
