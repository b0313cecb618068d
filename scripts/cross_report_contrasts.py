"""Contrasts the results pages quote that no single report tests: trials of two reports, or a
difference of two paired differences. Secondary and uncorrected (95%, no Holm): each says how
far a page's reading is carried by the data, none is a verdict of the platform.

Each contrast reads the per-seed test perplexities from the reports' "Trials" tables
(scripts/report_trials_csv.py's parser) and decides it with the platform's one rule,
analysis.decision.decide, at one look (Design.fixed): Welch's t where the two sides share no
initialization (different architectures), a paired t over seeds where they are paired by seed
(a difference of two T = 2 - T = 1 differences of one seed's runs). Welch also where the
platform did not check a pairing (two preconditioners: their parameters differ).

    python scripts/cross_report_contrasts.py
"""

from __future__ import annotations

from pathlib import Path

from report_trials_csv import report_rows

from cem_ablate.analysis.decision import Design, decide

FIGURES = Path(__file__).resolve().parents[1] / "docs" / "figures"
LR = 0.002  # every contrast below is at the CPU studies' one learning rate


def per_seed(report: str, variant: str, lr: float = LR) -> dict[int, float]:
    """Seed -> test perplexity of one variant at one learning rate of a report's trials."""
    out = {}
    for row in report_rows((FIGURES / report / "report.md").read_text(encoding="utf-8")):
        _, name, rate, seed, state, _, value, *_ = row
        if name == variant and state == "COMPLETE" and abs(rate - lr) <= 1e-12:
            out[seed] = value
    return out


def paired_delta(report: str, variant: str, baseline: str) -> dict[int, float]:
    """Seed -> variant - baseline of one report (both sides of one seed)."""
    v, b = per_seed(report, variant), per_seed(report, baseline)
    return {s: v[s] - b[s] for s in sorted(set(v) & set(b))}


def contrasts() -> list[tuple[str, object]]:
    llama600 = per_seed("fig4_attention_recursion_vs_reuse_cpu600", "llama,size=tiny")
    rows = []
    fig2a_cfg = per_seed("readings_cpu", "B_T1")  # CEM attention T = 1, P = I, shared KQ diagonal
    rows.append(
        (
            "Fig. 2a's CEM attention (readings arm B_T1) - Llama, 600 steps",
            decide(fig2a_cfg, llama600, paired=False, design=Design.fixed(min(len(fig2a_cfg), len(llama600)))),
        )
    )
    a_t2, b_t2 = per_seed("readings_cpu", "A_T2"), per_seed("readings_cpu", "B_T2")
    rows.append(
        (
            "CEM attention T = 2 with P = diag (arm A_T2) - with P = I (arm B_T2), 600 steps",
            decide(a_t2, b_t2, paired=False, design=Design.fixed(min(len(a_t2), len(b_t2)))),
        )
    )
    arm = {a: paired_delta("readings_cpu", f"{a}_T2", f"{a}_T1") for a in "ABCD"}
    for a in "BCD":
        d = decide(arm[a], arm["A"], paired=True, design=Design.fixed(len(arm["A"])))
        rows.append((f"readings: (T2 - T1) in arm {a} minus (T2 - T1) in arm A, paired by seed", d))
    return rows


def main() -> None:
    print("| contrast | Δ [95%] | test | n | p |")
    print("|---|---|---|---|---|")
    for name, d in contrasts():
        n = f"{d.n_pairs} pairs" if d.test.startswith("paired") else f"{d.n_variant} vs {d.n_baseline}"
        print(f"| {name} | {d.delta:+.3f} [{d.low:+.3f}, {d.high:+.3f}] | {d.test} | {n} | {d.p:.3g} |")


if __name__ == "__main__":
    main()
