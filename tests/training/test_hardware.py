"""Peak FLOP/s for MFU: the GPU table and the measured, cached CPU peak."""

import json
import math

import torch

from cem_ablate.training import hardware


def test_gpu_table():
    assert hardware.gpu_peak_flops("NVIDIA A100-SXM4-80GB", "bf16-mixed") == 312e12
    assert hardware.gpu_peak_flops("NVIDIA H100 PCIe", "bf16-mixed") == 756e12
    assert hardware.gpu_peak_flops("NVIDIA H100 80GB HBM3", "bf16-mixed") == 989e12
    assert hardware.gpu_peak_flops("NVIDIA GeForce RTX 4090", "16-mixed") == 165.2e12
    assert math.isnan(hardware.gpu_peak_flops("Mystery Accelerator 9000", "bf16-mixed"))


def test_cpu_peak_is_measured_once_and_cached(tmp_path, monkeypatch):
    calls = []

    def fake_measure(dtype):
        calls.append(dtype)
        return 1.5e11

    monkeypatch.setattr(hardware, "measure_matmul_flops", fake_measure)
    monkeypatch.setattr(hardware, "_measured", {})
    assert hardware.cpu_peak_flops(torch.float32, tmp_path) == 1.5e11
    saved = json.loads((tmp_path / "hardware" / "cpu-peak.json").read_text())
    assert list(saved.values()) == [1.5e11]
    monkeypatch.setattr(hardware, "_measured", {})  # a new process reads the file
    assert hardware.cpu_peak_flops(torch.float32, tmp_path) == 1.5e11
    assert len(calls) == 1
    # CPU ranks share one machine: the peak counts a node once
    assert hardware.total_peak_flops("cpu", "32-true", 2, 1) == hardware.device_peak_flops("cpu", "32-true")


def test_matmul_measurement_is_plausible():
    flops = hardware.measure_matmul_flops(size=256, warmup_s=0.05, measure_s=0.1)
    assert 1e8 < flops < 1e14
