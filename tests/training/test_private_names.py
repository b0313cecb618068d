"""The adapters that hold other libraries' private names (training/lightning_private.py,
training/torch_private.py): the installed versions are in the supported ranges, pyproject
pins the same ranges, and a library without the name is refused (Lightning) or answered
safely (torch) with its version named, at first use."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import lightning
import pytest
import tomllib
import torch
from packaging.specifiers import SpecifierSet

from cem_ablate.training import lightning_private, torch_private

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())


def test_the_installed_libraries_are_in_the_ranges_pyproject_pins():
    dependencies = PYPROJECT["project"]["dependencies"]
    assert f"lightning{lightning_private.SUPPORTED_LIGHTNING}" in dependencies
    assert f"torch{torch_private.SUPPORTED_TORCH}" in dependencies
    assert SpecifierSet(lightning_private.SUPPORTED_LIGHTNING).contains(lightning.__version__)
    assert SpecifierSet(torch_private.SUPPORTED_TORCH).contains(torch.__version__.split("+")[0])


def test_lightning_has_the_accumulation_test_training_reads():
    fit_loop = lightning.pytorch.Trainer(logger=False, enable_progress_bar=False, enable_checkpointing=False).fit_loop
    assert callable(getattr(fit_loop, lightning_private.SHOULD_ACCUMULATE))


def test_a_lightning_without_it_is_refused_naming_the_version_and_the_range(monkeypatch):
    monkeypatch.setattr(lightning_private, "_checked", False)
    trainer = SimpleNamespace(fit_loop=SimpleNamespace())  # a fit loop of a Lightning that renamed it
    with pytest.raises(lightning_private.UnsupportedLightning) as err:
        lightning_private.should_accumulate(trainer)
    assert lightning.__version__ in str(err.value) and lightning_private.SUPPORTED_LIGHTNING in str(err.value)


def test_torch_answers_the_bf16_question_and_a_torch_without_it_counts_as_emulated(monkeypatch):
    assert isinstance(torch_private.cpu_has_native_bf16(), bool)
    monkeypatch.setattr(torch_private, "MKLDNN_BF16", "_no_such_op")
    with pytest.warns(UserWarning, match=torch.__version__.replace("+", r"\+")):
        assert torch_private.cpu_has_native_bf16() is False
