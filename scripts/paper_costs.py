"""The per-figure GPU-hours table of docs/reproducing.md ("Learning-rate transfer"): every paper figure study's
dry run, each priced alone, under the paper's protocol (1 seed, full grid), calibrated (3 seeds, full grid) and its
`transfer` scale at 3 fixed seeds (its proxies' too; the scale itself trains 2 with a pooled variance,
docs/results/pooled-variance.md). The eight as one campaign (each shared trial once) is what `cem-ablate study studies/fig*.yaml
--dry-run` prints.

    python scripts/paper_costs.py      # from the repository root
"""

import glob

from cem_ablate.cli.study_command import load_expanded
from cem_ablate.study.dry_run import plan, transfer_costs
from cem_ablate.study.estimates import CPU_TRAIN_FLOPS_PER_S

T, MFU = 312.0, 0.4
THREE_SEEDS = ["seeds=[0,1,2]", "lr_search.proxy_seeds=[0,1,2]", "statistics.variance=own", "statistics.alpha=0.05"]
print(
    "| figure | variants | paper protocol: 1 seed, full grid | calibrated: 3 seeds, full grid | transfer: proxy + target, 3 seeds | transfer / calibrated |"
)
print("|---|---|---|---|---|---|")
tot = [0, 0, 0]
for f in sorted(glob.glob("studies/fig*.yaml")):
    paper = load_expanded(f, None, ["seeds=[0]"])
    rows = plan(paper)
    one = sum(r.trials * r.estimate.gpu_hours(T, MFU) for r in rows)
    cal = load_expanded(f, None, ["seeds=[0,1,2]"])
    three = sum(r.trials * r.estimate.gpu_hours(T, MFU) for r in plan(cal))
    tr = load_expanded(f, "transfer", THREE_SEEDS)
    c = transfer_costs(tr, T, MFU, CPU_TRAIN_FLOPS_PER_S)
    proxy = sum(r["proxy_gpu_hours"] for r in c)
    target = sum(r["target_gpu_hours"] for r in c)
    tot[0] += one
    tot[1] += three
    tot[2] += proxy + target
    print(
        f"| {paper.spec.name} | {len(rows)} | {one:,.0f} | {three:,.0f} | {proxy + target:,.0f} ({proxy:,.0f} + {target:,.0f}) | {(proxy + target) / three:.2f} |"
    )
print(f"| all eight | | {tot[0]:,.0f} | {tot[1]:,.0f} | {tot[2]:,.0f} | {tot[2] / tot[1]:.2f} |")
