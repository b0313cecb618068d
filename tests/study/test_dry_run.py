"""The dry run's time for the trials left, from what the storage's finished trials took."""

from types import SimpleNamespace

from cem_ablate.study.dry_run import measured_line


def _row(key: str, trials: int):
    return SimpleNamespace(variant=SimpleNamespace(key=key), trials=trials)


def test_measured_line_times_the_trials_left_at_their_variants_mean():
    rows = [_row("a", 6), _row("b", 6), _row("c", 6)]
    seconds = {"a": [100.0, 200.0], "b": [600.0]}  # c: nothing finished
    # a: 4 left at 150 s, b: 5 left at 600 s -> 3600 s = 1 h; c's 6 are not covered
    line = measured_line(rows, seconds, finished={"a": 2, "b": 1})
    assert line.startswith("measured: 3 finished trials of 2 of the 3 variants are in the storage")
    assert "the 9 trials left of those variants take 1 h of trial time, about 1 h wall clock with 1 worker " in line
    assert "take 1 h of trial time, about 30 min wall clock with 2 workers" in measured_line(
        rows, seconds, finished={"a": 2, "b": 1}, workers=2
    )
    assert line.endswith("; 6 trials of variants with none finished not included")


def test_no_measured_line_without_finished_trials():
    assert measured_line([_row("a", 6)], {}, {}) is None


def test_a_grid_of_fewer_than_three_rates_says_no_lr_star_is_estimated():
    from cem_ablate.study.dry_run import lr_plan_text
    from cem_ablate.study.spec import LrSearchConfig

    def text(grid):
        return lr_plan_text(SimpleNamespace(spec=SimpleNamespace(lr_search=LrSearchConfig(grid=grid), seeds=[0, 1])))

    assert text([4e-3]) == (
        "learning rates (grid): 0.004: no lr* is estimated (fewer than 3); the verdicts compare "
        "at a fixed learning rate; seeds [0, 1]"
    )
    assert "no lr*" in text([2e-3, 4e-3])
    assert text([2e-3, 4e-3, 8e-3]) == "learning rates (grid, akima fit): 0.002, 0.004, 0.008; seeds [0, 1]"


def test_the_dry_run_names_the_device_profile_here_and_on_a_gpu():
    from pathlib import Path

    from cem_ablate.cli.study_command import load_expanded
    from cem_ablate.study.dry_run import profile_lines

    study = Path(__file__).resolve().parents[2] / "studies" / "quickstart.yaml"
    lines = profile_lines(load_expanded(str(study), None, []))
    assert lines[0].startswith("device profile here: cpu (cpu), precision 32-true, AdamW single, clip norm 1")
    assert lines[1].startswith("device profile on a bf16 GPU: cuda (gpu), precision bf16-mixed, AdamW fused")
    assert len(lines) == 2  # every quickstart variant trains with one profile
