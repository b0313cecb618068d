"""scripts/mup_width_csv_report.py: the pooled GPU-lease table (lr* drift across width) and its
transfer check (full grid vs transferred lr*, verdicts from each), on trial CSVs built from
known curves."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from tests.analysis.scripts import load_script

GRID = [1.0e-3, 1.41e-3, 2.0e-3, 2.83e-3, 4.0e-3, 5.66e-3]
FIELDS = ["study", "variant", "lr", "seed", "state", "status", "value", "seconds", "trial_key", "reason"]


@pytest.fixture(scope="module")
def report():
    return load_script("mup_width_csv_report")


def curve(lr: float, lr_star: float, floor: float, seed: int) -> float:
    """A parabola in log2(lr) with its minimum `floor` at `lr_star`, a small per-seed offset."""
    return floor + 0.3 * (math.log2(lr) - math.log2(lr_star)) ** 2 + 0.01 * (seed - 1)


def write(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=FIELDS)
        out.writeheader()
        for row in rows:
            out.writerow(
                {"state": "COMPLETE", "status": "finished", "seconds": 1, "trial_key": "k", "reason": "", **row}
            )
    return path


def test_the_drift_and_the_transfer_check_follow_the_curves(report, tmp_path, capsys):
    # Llama's optimum doubles from d 32-128 (2e-3) to d 256 (4e-3); the others sit at 2e-3.
    # CEM MLP ties Llama on the full grid but its transfer target is a whole unit worse.
    floors = {"llama": 5.0, "cem_attention_T1": 6.0, "cem_attention_T2": 6.5, "cem_mlp_T1": 5.0, "full_cem_T2": 6.2}
    grid_rows, target_rows = [], []
    for family, floor in floors.items():
        for d in (32, 64, 128, 256):
            star = 4.0e-3 if (family == "llama" and d == 256) else 2.0e-3
            for seed in (0, 1, 2):
                for lr in GRID:
                    grid_rows.append(
                        {
                            "study": f"mup_width_gpu_scaled/d{d}_{family}-x",
                            "variant": f"d{d}_{family}",
                            "lr": lr,
                            "seed": seed,
                            "value": curve(lr, star, floor, seed),
                        }
                    )
        for seed in (0, 1, 2):  # trained at d 256 at the proxy's (d 64) lr*, 2e-3
            shift = 1.0 if family == "cem_mlp_T1" else 0.0
            value = curve(2.0e-3, star, floor, seed) + shift + 0.01 * (seed - 1)
            target_rows.append(
                {
                    "study": f"transfer_gpu_scaled/{family}-x",
                    "variant": family,
                    "lr": 2.0e-3,
                    "seed": seed,
                    "value": value,
                }
            )
    # A partial seed (one rate) must be left out of the fits, not weigh its rate more.
    grid_rows.append(
        {"study": "mup_width_gpu_scaled/d64_llama-x", "variant": "d64_llama", "lr": 1.0e-3, "seed": 7, "value": 99.0}
    )
    report.main([str(write(tmp_path / "a.csv", grid_rows)), str(write(tmp_path / "b.csv", target_rows))], at=256)
    text = capsys.readouterr().out
    rows = {
        tuple(c.strip() for c in line.strip("|").split("|")[:2]): line
        for line in text.splitlines()
        if line.startswith("| ")
    }

    llama_drift = float(rows[("llama", "drift max/min")].split("|")[4].strip().rstrip("x").split("x")[0])
    assert 1.7 <= llama_drift <= 2.3  # the doubling, through Akima on a sqrt(2) grid
    for family in ("cem_attention_T1", "cem_attention_T2", "cem_mlp_T1", "full_cem_T2"):
        assert float(rows[(family, "drift max/min")].split("|")[4].strip().rstrip("x")) < 1.05
    assert rows[("llama", "64")].split("|")[3].strip() == "3"  # seed 7 (partial) left out

    # The transfer check: Llama's target sits 0.3 * 1^2 above its d 256 optimum (2e-3 vs 4e-3).
    line = next(v for k, v in rows.items() if k[0] == "llama" and "±" in v)
    gap = float(line.split("|")[7].split()[0])
    assert 0.2 <= gap <= 0.4
    # ... and on the quadratic fitted within an octave of lr*: 0.3 / 5.0, lr* at 4e-3, a good fit
    smooth = line.split("|")[9].split()
    assert 5.5 <= float(smooth[0].rstrip("%")) <= 6.5, smooth
    assert smooth[3].startswith("(0.004")
    assert float(smooth[-1].rstrip(")")) > 0.05  # lack-of-fit p
    verdicts = {k[0]: v for k, v in rows.items() if v.rstrip().endswith(("| yes |", "| NO |"))}
    assert verdicts["cem_attention_T1"].split("|")[2].strip().startswith("worse")
    assert verdicts["cem_attention_T1"].rstrip().endswith("| yes |")
    assert verdicts["cem_mlp_T1"].split("|")[2].strip().startswith("unresolved")  # a tie on the grid
    assert verdicts["cem_mlp_T1"].split("|")[3].strip().startswith("worse")  # a unit worse transferred
    assert verdicts["cem_mlp_T1"].rstrip().endswith("| NO |")


def test_plot_draws_each_familys_sweeps_and_lr_star_against_width(report, tmp_path, capsys):
    rows = [
        {
            "study": f"mup_width_gpu_scaled/d{d}_llama-x",
            "variant": f"d{d}_llama",
            "lr": lr,
            "seed": seed,
            "value": curve(lr, 2.0e-3, 5.0, seed),
        }
        for d in (32, 64)
        for seed in (0, 1, 2)
        for lr in GRID
    ]
    report.main([str(write(tmp_path / "a.csv", rows))], plot=str(tmp_path / "figures"))
    drawn = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert drawn == ["lr_star_vs_width.png", "ppl_vs_lr_llama.png"]  # only the families with trials


def test_other_width_studies_pool_by_prefix_and_a_reused_trial_counts_once(report, tmp_path, capsys):
    # Standard parametrization's CPU studies: a first scale (seed 0), a later one that reuses it
    # by key and adds seeds 1, 2 (seed 0's rows appear in both), and a scale of extra rates.
    rows = []
    for d, star in ((32, 8.0e-3), (64, 2.0e-3)):
        for seed in (0, 1, 2):
            studies = ["std_width_cpu_x_seed0", "std_width_cpu_x"] if seed == 0 else ["std_width_cpu_x"]
            for study in studies:
                for lr in GRID:
                    rows.append(
                        {
                            "study": f"{study}/d{d}_llama-k",
                            "variant": f"d{d}_llama",
                            "lr": lr,
                            "seed": seed,
                            "value": curve(lr, star, 5.0, seed),
                        }
                    )
            if d == 32:  # above the grid: brackets d 32's optimum
                for lr in (8.0e-3, 1.13e-2, 1.6e-2):
                    rows.append(
                        {
                            "study": f"std_width_cpu_x_high/d{d}_llama-k",
                            "variant": f"d{d}_llama",
                            "lr": lr,
                            "seed": seed,
                            "value": curve(lr, star, 5.0, seed),
                        }
                    )
    rows.append(
        {"study": "mup_width_gpu_scaled/d64_llama-k", "variant": "d64_llama", "lr": 1.0e-3, "seed": 0, "value": 99.0}
    )  # another design: left out under this prefix
    path = str(write(tmp_path / "std.csv", rows))

    report.main([path])  # the default prefix: only that one stray row, one rate, no fit
    text = capsys.readouterr().out
    assert "| llama | 32 |" not in text and "d64_llama: fewer than 3 rates" in text
    report.main([path], studies="std_width_cpu")
    text = capsys.readouterr().out
    table = {
        tuple(c.strip() for c in line.strip("|").split("|")[:2]): line.split("|")
        for line in text.splitlines()
        if line.startswith("| ")
    }
    assert table[("llama", "32")][3].strip() == "3" and table[("llama", "64")][3].strip() == "3"
    lr32 = float(table[("llama", "32")][4].split()[0])
    assert 6.5e-3 <= lr32 <= 9.5e-3 and "edge" not in table[("llama", "32")][4]  # the high rates bracket it
    assert 3.3 <= float(table[("llama", "drift max/min")][4].strip().rstrip("x")) <= 4.7


def test_a_cpu_transfer_study_pools_only_its_own_proxies_and_is_checked_at_the_target(report, tmp_path, capsys):
    # One CPU store: the zero-readout width study (d 64 through its transfer proxy, d 256 full
    # grid), that transfer study's targets, and another recipe's proxies that must not mix in.
    rows = []
    for seed in (0, 1, 2):
        for lr in GRID:
            rows.append(
                {
                    "study": "transfer_cpu_zero_x_proxy/llama-proxy-k",
                    "variant": "llama@proxy",
                    "lr": lr,
                    "seed": seed,
                    "value": curve(lr, 2.0e-3, 5.5, seed),
                }
            )
            rows.append(
                {
                    "study": "transfer_cpu_proxy/llama-proxy-j",
                    "variant": "llama@proxy",
                    "lr": lr,
                    "seed": seed + 3,
                    "value": curve(lr, 5.66e-3, 9.0, seed),
                }
            )  # another recipe
            rows.append(
                {
                    "study": "mup_width_zero_x_d256/d256_llama-k",
                    "variant": "d256_llama",
                    "lr": lr,
                    "seed": seed,
                    "value": curve(lr, 2.83e-3, 5.0, seed),
                }
            )
        rows.append(
            {
                "study": "transfer_cpu_zero_x/llama-k",
                "variant": "llama",
                "lr": 2.0e-3,
                "seed": seed,
                "value": curve(2.0e-3, 2.83e-3, 5.0, seed),
            }
        )
    path = str(write(tmp_path / "cpu.csv", rows))
    report.main([path], at=256, transfer="transfer_cpu_zero_x", studies="mup_width_zero_x", proxies="transfer_cpu_zero")
    text = capsys.readouterr().out
    table = {
        tuple(c.strip() for c in line.strip("|").split("|")[:2]): line.split("|")
        for line in text.splitlines()
        if line.startswith("| ")
    }
    assert table[("llama", "64")][3].strip() == "3"  # the other recipe's seeds 3-5 left out
    assert abs(float(table[("llama", "64")][4].split()[0]) - 2.0e-3) < 2e-4
    target = next(v for k, v in table.items() if k[0] == "llama" and "±" in "|".join(v))
    assert target[5].strip() == "0.002"  # transferred from the proxy's lr*
    assert 0.05 <= float(target[7].split()[0]) <= 0.1  # 0.3 * 0.5^2 above the d 256 optimum
    assert ("cem_mlp_T1", "-") not in table  # no verdict rows for families neither study has


def test_targets_of_several_transfer_studies_pool_and_a_family_without_a_full_grid_is_not_compared(
    report, tmp_path, capsys
):
    # Llama's target in one transfer study, CEM attention T = 1's in another (one per family, as
    # on CPU); only Llama has a d 256 full grid, so T = 1's verdict has nothing to agree with.
    rows = []
    for seed in (0, 1, 2):
        for lr in GRID:
            rows.append(
                {
                    "study": "mup_width_cpu_d256/d256_llama-k",
                    "variant": "d256_llama",
                    "lr": lr,
                    "seed": seed,
                    "value": curve(lr, 2.83e-3, 5.0, seed),
                }
            )
        for study, family, floor in (("transfer_cpu_a", "llama", 5.0), ("transfer_cpu_b", "cem_attention_T1", 7.0)):
            rows.append(
                {
                    "study": f"{study}/{family}-k",
                    "variant": family,
                    "lr": 2.0e-3,
                    "seed": seed,
                    "value": curve(2.0e-3, 2.83e-3, floor, seed),
                }
            )
        # a later study that retrains Llama's target at another rate (as with more proxy seeds)
        rows.append(
            {
                "study": "transfer_cpu_c/llama-k",
                "variant": "llama",
                "lr": 2.83e-3,
                "seed": seed,
                "value": curve(2.83e-3, 2.83e-3, 5.0, seed),
            }
        )
    path = str(write(tmp_path / "cpu.csv", rows))
    report.main([path], at=256, transfer="transfer_cpu_a", studies="mup_width_cpu")
    assert "worse" not in capsys.readouterr().out  # only the named study's targets: no T = 1
    report.main([path], at=256, transfer="transfer_cpu_a,transfer_cpu_b", studies="mup_width_cpu")
    lines = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| cem_attention_T1")]
    (verdict,) = lines
    assert verdict[2].strip() == "-" and verdict[3].strip().startswith("worse") and verdict[4].strip() == "-"

    def transferred(names: str) -> str:  # Llama's transferred rate in the transfer table
        report.main([path], at=256, transfer=names, studies="mup_width_cpu")
        (line,) = [x.split("|") for x in capsys.readouterr().out.splitlines() if x.startswith("| llama |") and "±" in x]
        return line[5].strip()

    assert transferred("transfer_cpu_a,transfer_cpu_c") == "0.002"  # where two studies have it: the first
    assert transferred("transfer_cpu_c,transfer_cpu_a") == "0.00283"


def test_a_rate_only_one_seed_has_is_left_out_not_the_seeds_without_it(report, tmp_path, capsys):
    # A later scale added 7.07e-4 and so far finished it for seed 0 only; seed 5 was cut short.
    grid = {lr: 5.0 for lr in GRID}
    per_seed = {0: {**grid, 7.07e-4: 9.0}, 1: dict(grid), 2: dict(grid), 5: {1.0e-3: 5.0}}
    rates, seeds = report.complete_rectangle(per_seed)
    assert rates == set(GRID) and seeds == [0, 1, 2]
    rows = [
        {
            "study": "mup_width_cpu_x/d256_llama-k",
            "variant": "d256_llama",
            "lr": lr,
            "seed": seed,
            "value": curve(lr, 2.83e-3, 5.0, seed),
        }
        for seed in (0, 1, 2)
        for lr in GRID
    ]
    rows.append(
        {"study": "mup_width_cpu_y/d256_llama-k", "variant": "d256_llama", "lr": 7.07e-4, "seed": 0, "value": 99.0}
    )
    report.main([str(write(tmp_path / "a.csv", rows))], studies="mup_width_cpu")
    (line,) = [x.split("|") for x in capsys.readouterr().out.splitlines() if x.startswith("| llama | 256 |")]
    assert line[3].strip() == "3" and abs(float(line[4].split()[0]) - 2.83e-3) < 2e-4
