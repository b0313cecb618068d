"""`cem-ablate power`: the printed power is scipy's noncentral-t power."""

import math
import re

from scipy import stats

from cem_ablate.cli.main import main


def test_power_of_five_seeds_is_the_noncentral_t_power(capsys):
    assert main(["power", "--seeds", "5", "--delta", "1", "--std", "1"]) == 0
    out = capsys.readouterr().out
    printed = float(re.search(r"power at Δ = 1 .*: ([0-9.]+)", out).group(1))
    n, df = 5, 4
    crit = stats.t.ppf(0.975, df)
    expected = stats.nct.sf(crit, df, math.sqrt(n)) + stats.nct.cdf(-crit, df, math.sqrt(n))
    assert abs(printed - expected) <= 0.02
    assert "false-positive rate: 0.05" in out and "80% power" in out


def test_sequential_design_prints_its_looks_and_objective_units(capsys):
    assert main(["power", "--seeds", "2..5", "--at", "both", "--std", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "sequential seeds 2..5" in out and "over 8 tests" in out
    mde = float(re.search(r"80% power: ([0-9.]+) ×", out).group(1))
    in_units = float(re.search(r"= ([0-9.]+) in the objective's units", out).group(1))
    assert abs(in_units - 0.5 * mde) < 1e-3


def test_a_pooled_design_is_the_noncentral_t_with_every_points_degrees_of_freedom(capsys):
    assert main(["power", "--seeds", "2", "--pooled", "8", "--alpha", "0.034", "--delta", "3.52", "--std", "1"]) == 0
    out = capsys.readouterr().out
    printed = float(re.search(r"power at Δ = 3.52 .*: ([0-9.]+)", out).group(1))
    df, nc, crit = 8, 3.52, stats.t.ppf(1 - 0.034 / 2, 8)  # 8 points x (2 - 1) df; se = std x sqrt(1/2 + 1/2)
    assert printed == round(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc), 3)
    assert "pooled t over 8 points" in out


def test_bad_arguments_are_one_error_line(capsys):
    for argv, key in (
        (["--seeds", "five"], "--seeds"),
        (["--seeds", "5..2"], "--seeds"),
        (["--seeds", "2..5", "--at", "bth"], "Did you mean 'both'"),
        (["--seeds", "5", "--alpha", "2"], "--alpha"),
        (["--seeds", "5", "--delta", "1"], "--std"),
        (["--seeds", "2", "--pooled", "1"], "--pooled"),
        (["--seeds", "2", "--pooled", "2.5"], "--pooled"),
    ):
        assert main(["power", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and key in err[0]
