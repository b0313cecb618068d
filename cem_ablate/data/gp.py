"""Gaussian-process regression data (docs/design/experiments.md#s9-gaussian-process-study, the paper's Table 3).

Choices (the paper leaves them open; docs/design/experiments.md#s9-gaussian-process-study asks to document them):

- Plain per-point regression: an example is one input x in R^dim (dim 10) and its
  target y; no in-context sequences. The regressor sees x alone.
- Inputs x ~ Uniform[-1, 1]^dim. One function f ~ GP(0, k) is drawn jointly at all
  train, validation and test inputs (Cholesky with jitter 1e-6), and
  y = f(x) + noise · N(0, 1). The dataset is a pure function of the config and
  `data_seed`; model seeds vary the initialization only.
- Kernels, length scale l:
  `rbf`            k(x, x') = exp(-|x - x'|² / (2 l²))
  `nonstationary`  Gibbs kernel with an input-dependent length scale
                   l(x) = l · exp(x_1 / 2)  (from 0.61 l to 1.65 l along x_1):
                   k(x, x') = (2 l(x) l(x') / (l(x)² + l(x')²))^(dim/2)
                              · exp(-|x - x'|² / (l(x)² + l(x')²))
  With dim 10 and l = 1 the exact GP posterior's test RMSE is well under the prior
  standard deviation yet far from zero: learnable, not trivial (figures in
  docs/lab-notes/from-code-comments.md).
- Metric: RMSE on the test split.

Samples are cached under the cache directory (the Cholesky factor takes seconds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock
from torch.utils.data import TensorDataset

from cem_ablate.config.identity import digest
from cem_ablate.data.config import GPConfig, cache_root
from cem_ablate.data.datamodule import InMemorySplitsDataModule

JITTER = 1e-6


def kernel_matrix(x: np.ndarray, cfg: GPConfig) -> np.ndarray:
    sq = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    if cfg.kernel == "rbf":
        return np.exp(-sq / (2 * cfg.length_scale**2))
    scale = cfg.length_scale * np.exp(x[:, 0] / 2)
    l2 = scale[:, None] ** 2 + scale[None, :] ** 2
    prefactor = (2 * scale[:, None] * scale[None, :] / l2) ** (x.shape[1] / 2)
    return prefactor * np.exp(-sq / l2)


def sample_gp(cfg: GPConfig) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{split: (x (n, dim) float32, y (n,) float32)}, deterministic in the config."""
    rng = np.random.default_rng(cfg.data_seed)
    sizes = {"train": cfg.n_train, "validation": cfg.n_val, "test": cfg.n_test}
    n = sum(sizes.values())
    x = rng.uniform(-1.0, 1.0, size=(n, cfg.dim))
    chol = np.linalg.cholesky(kernel_matrix(x, cfg) + JITTER * np.eye(n))
    y = chol @ rng.standard_normal(n) + cfg.noise * rng.standard_normal(n)
    out, start = {}, 0
    for split, size in sizes.items():
        out[split] = (x[start : start + size].astype(np.float32), y[start : start + size].astype(np.float32))
        start += size
    return out


def cached_gp(cfg: GPConfig, root: Path | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    key = digest(cfg.__dict__, chars=16)  # the config names its data (config.identity)
    path = (root or cache_root()) / "gp" / f"{key}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            data = sample_gp(cfg)
            tmp = path.with_name(path.name + ".tmp.npz")
            arrays = {f"{s}_{v}": arr for s, (x, y) in data.items() for v, arr in (("x", x), ("y", y))}
            # numpy's stub types the named arrays' dict against its `allow_pickle: bool` keyword
            np.savez(tmp, **arrays)  # type: ignore[arg-type]
            tmp.replace(path)
    with np.load(path) as npz:
        return {s: (npz[f"{s}_x"], npz[f"{s}_y"]) for s in ("train", "validation", "test")}


class GPDataModule(InMemorySplitsDataModule):
    def __init__(self, cfg: GPConfig, *, cache_dir: str | None = None, **loader_options: Any):
        super().__init__(**loader_options)
        self.cfg = cfg
        self.cache_dir = cache_dir

    def setup(self, stage: str | None = None) -> None:
        if self.splits is None:
            data = cached_gp(self.cfg, cache_root(self.cache_dir))
            self.splits = {s: TensorDataset(torch.from_numpy(x), torch.from_numpy(y)) for s, (x, y) in data.items()}

    def describe(self) -> dict[str, Any]:
        c = self.cfg
        return {
            "corpus": f"GP regression, {c.kernel} kernel, dim {c.dim}, length scale {c.length_scale}, "
            f"noise {c.noise}, data seed {c.data_seed}",
            "examples_train": c.n_train,
            "examples_validation": c.n_val,
            "examples_test": c.n_test,
        }
