"""lr* per variant of the step-scaling study (studies/mup_width.yaml --scale steps) over the rates
where every seed finished: a study still running (or cut short) has its lowest rates for every
seed first, and a fit over unequal seeds per rate would weigh the rates differently. The
estimators are the report's (analysis.akima.fit_akima on the seed mean, analysis.optimum's
95% interval).

    python scripts/mup_steps_report.py mlruns/optuna.db   # in the checkout that ran the study
"""

import argparse
from collections import defaultdict

import numpy as np
import optuna

from cem_ablate.analysis.akima import fit_akima
from cem_ablate.analysis.optimum import optimum_bounds


def main(opts: argparse.Namespace) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{opts.optuna_db}"
    vals = defaultdict(lambda: defaultdict(dict))
    for s in optuna.get_all_study_summaries(storage):
        if not s.study_name.startswith(f"{opts.study}/"):
            continue
        st = optuna.load_study(study_name=s.study_name, storage=storage)
        v = st.user_attrs.get("variant", s.study_name)
        for t in st.trials:
            if t.state.name == "COMPLETE" and t.user_attrs.get("status") == "finished":
                vals[v][int(t.params["seed"])][float(t.params["lr"])] = float(t.value)
    print(
        f"| variant | rates with {opts.seeds} seeds | lr* (Akima, seed mean) [95%] | test ppl at lr* | per-seed ppl at the best common rate |"
    )
    print("|---|---|---|---|---|")
    for v in sorted(vals):
        per_seed = vals[v]
        common = sorted(set.intersection(*(set(p) for p in per_seed.values()))) if len(per_seed) == opts.seeds else []
        if len(common) < 3:
            print(f"| {v} | {len(common)} | - | - | - |")
            continue
        sub = {s: {lr: p[lr] for lr in common} for s, p in per_seed.items()}
        fit = fit_akima([(lr, x) for p in sub.values() for lr, x in p.items()])
        b = optimum_bounds(sub, fit.lrs, fit.ppls, fit.lr_star, fit.ppl_star)
        iv = f"[{b.lr[0]:.3g}, {b.lr[1]:.3g}]" if b.lr else f"({b.reason})"
        best = min(common, key=lambda lr: np.mean([sub[s][lr] for s in sub]))
        edge = f" ({fit.edge} edge)" if fit.edge else ""
        print(
            f"| {v} | {len(common)} ({common[0]:.3g}-{common[-1]:.3g}) | {fit.lr_star:.3g}{edge} {iv} | {fit.ppl_star:.3f} | "
            f"lr {best:.3g}: {', '.join(f'{sub[s][best]:.3f}' for s in sorted(sub))} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("optuna_db", help="the study's Optuna SQLite file")
    parser.add_argument("--study", default="mup_steps_cpu", help="study name (default mup_steps_cpu)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds a rate needs (default 3)")
    main(parser.parse_args())
