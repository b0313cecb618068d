"""GP regression and MQAR data: deterministic per seed, and what they claim to be."""

import numpy as np

from cem_ablate.config import parse
from cem_ablate.data.config import DataConfig, GPConfig, MQARConfig
from cem_ablate.data.gp import cached_gp, kernel_matrix, sample_gp
from cem_ablate.data.mqar import IGNORE_INDEX, MQARDataModule, generate_mqar

SMALL_GP = dict(n_train=64, n_val=16, n_test=32)


def test_gp_data_is_deterministic_per_seed(tmp_path):
    a = sample_gp(GPConfig(**SMALL_GP, data_seed=3))
    b = sample_gp(GPConfig(**SMALL_GP, data_seed=3))
    c = sample_gp(GPConfig(**SMALL_GP, data_seed=4))
    for split in a:
        assert np.array_equal(a[split][0], b[split][0]) and np.array_equal(a[split][1], b[split][1])
    assert not np.array_equal(a["train"][1], c["train"][1])
    assert a["train"][0].shape == (64, 10) and a["test"][1].shape == (32,)
    cached = cached_gp(GPConfig(**SMALL_GP, data_seed=3), tmp_path)
    assert np.array_equal(cached["validation"][1], a["validation"][1])


def test_gp_kernels_are_valid_and_different():
    x = np.random.default_rng(0).uniform(-1, 1, size=(40, 10))
    rbf = kernel_matrix(x, GPConfig(kernel="rbf"))
    gibbs = kernel_matrix(x, GPConfig(kernel="nonstationary"))
    for k in (rbf, gibbs):
        assert np.allclose(k, k.T) and np.allclose(np.diag(k), 1.0)
        assert np.linalg.eigvalsh(k).min() > -1e-9  # positive semi-definite
    assert not np.allclose(rbf, gibbs)


def test_mqar_targets_are_the_values_of_the_queried_keys():
    cfg = MQARConfig(vocab_size=64, num_kv_pairs=5)
    x, y = generate_mqar(cfg, seq_len=32, n=50, seed=7)
    x2, y2 = generate_mqar(cfg, seq_len=32, n=50, seed=7)
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    for row_x, row_y in zip(x, y):
        pairs = dict(zip(row_x[0:10:2].tolist(), row_x[1:10:2].tolist()))
        assert len(pairs) == 5 and all(1 <= k < 32 for k in pairs) and all(32 <= v < 64 for v in pairs.values())
        queries = np.flatnonzero(row_y != IGNORE_INDEX)
        assert len(queries) == 5
        assert sorted(row_x[queries].tolist()) == sorted(pairs)
        assert all(row_y[q] == pairs[row_x[q]] for q in queries)


def test_mqar_splits_differ_and_are_reproducible():
    cfg = parse(
        DataConfig, {"task": "mqar", "block_size": 40, "mqar": {"n_train": 30, "n_val": 5, "n_test": 10}}, "data"
    )
    dm = MQARDataModule(cfg, batch_size=4, seed=0, total_micro_batches=3)
    dm.setup()
    again = MQARDataModule(cfg, batch_size=4, seed=0, total_micro_batches=3)
    again.setup()
    assert np.array_equal(dm.splits["test"].tensors[0], again.splits["test"].tensors[0])
    assert not np.array_equal(dm.splits["train"].tensors[0][:10], dm.splits["test"].tensors[0])
