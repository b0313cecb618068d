"""scripts/lr_drift_bootstrap.py: the seed bootstrap of the lr* drift across width, on trial
CSVs built from known curves."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from tests.analysis.scripts import load_script

GRID = [1.0e-3, 1.41e-3, 2.0e-3, 2.83e-3, 4.0e-3, 5.66e-3]
FIELDS = ["study", "variant", "lr", "seed", "state", "status", "value", "seconds", "trial_key", "reason"]


@pytest.fixture(scope="module")
def bootstrap():
    return load_script("lr_drift_bootstrap")


def write(path: Path, stars: dict[tuple[str, int], list[float]]) -> Path:
    """One width study: per (family, width) each seed's parabola in log2 lr with its own optimum."""
    with path.open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=FIELDS)
        out.writeheader()
        for (family, d), per_seed in stars.items():
            for seed, star in enumerate(per_seed):
                for lr in GRID:
                    out.writerow(
                        {
                            "study": f"mup_width_gpu/d{d}_{family}-x",
                            "variant": f"d{d}_{family}",
                            "lr": lr,
                            "seed": seed,
                            "state": "COMPLETE",
                            "status": "finished",
                            "value": 5.0 + 0.3 * (math.log2(lr) - math.log2(star)) ** 2,
                            "seconds": 1,
                            "trial_key": "k",
                            "reason": "",
                        }
                    )
    return path


def test_agreeing_seeds_give_no_spread_and_disagreeing_ones_cross_the_bound(bootstrap, tmp_path, capsys):
    stars = {
        ("llama", 32): [2e-3] * 3,
        ("llama", 64): [2.4e-3] * 3,  # every seed agrees: 1.2x, no spread
        ("cem_mlp_T1", 32): [2e-3] * 3,
        ("cem_mlp_T1", 64): [1.2e-3, 2e-3, 4e-3],
    }  # the seed mean's optimum near 2e-3, seeds far apart
    rows = {
        r["family"]: r
        for r in bootstrap.main([str(write(tmp_path / "t.csv", stars))], "mup_width_gpu", "none", 1.5, (32, 64))
    }
    llama, mlp = rows["llama"], rows["cem_mlp_T1"]
    assert llama["measured"] == pytest.approx(1.2, rel=0.01)
    assert llama["low"] == pytest.approx(llama["high"]) and llama["share_above"] == 0.0
    assert mlp["measured"] < 1.5 and mlp["high"] > 1.5  # a draw of the extreme seeds crosses it
    assert 0.0 < mlp["share_above"] < 1.0
    assert "| cem_mlp_T1 | 3/3 |" in capsys.readouterr().out


def test_exact_enumeration_of_three_seeds(bootstrap):
    per_seed = {s: {lr: (math.log2(lr) - math.log2(2e-3)) ** 2 + s for lr in GRID} for s in range(3)}
    import numpy as np

    draws = bootstrap.width_draws(per_seed, np.random.default_rng(0))
    assert draws.shape == (27,)  # 3^3 ordered resamples, each equally likely
    assert np.allclose(2.0**draws, 2e-3, rtol=0.01)  # offsets per seed do not move the optimum
