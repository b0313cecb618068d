import pytest
import torch

from components.preconditioner import PreconditionerConfig, build_preconditioner
from tests.components.reference_cem import dense_preconditioner


@pytest.mark.parametrize("name", ["identity", "diag", "diag_lowrank"])
@pytest.mark.parametrize("heads", [None, 3])
def test_apply_and_fold_equal_dense_matrix(name, heads):
    torch.manual_seed(0)
    D, R = 12, 2
    pre = build_preconditioner(PreconditionerConfig(name, R), D, heads, default_rank=4).double()
    with torch.no_grad():
        for p in pre.parameters():
            p.normal_(0, 0.5)
    shape = (5, D) if heads is None else (5, heads, D)
    y = torch.randn(*shape, dtype=torch.float64)
    w = torch.randn(*((7, D) if heads is None else (heads, 7, D)), dtype=torch.float64)
    for k in range(heads or 1):
        P = dense_preconditioner(pre, D, None if heads is None else k)
        yk, wk = (y, w) if heads is None else (y[:, k], w[k])
        applied = pre.apply(y) if heads is None else pre.apply(y)[:, k]
        folded = pre.fold(w) if heads is None else pre.fold(w)[k]
        assert torch.allclose(applied, yk @ P.T, atol=1e-12)
        assert torch.allclose(folded, wk @ P, atol=1e-12)


def test_paper_initialisation():
    D = 16
    pre = build_preconditioner(PreconditionerConfig("diag_lowrank", 4), D, 2, default_rank=4)
    assert pre.p.shape == (2, D) and pre.u.shape == (2, D, 4) and pre.v.shape == (2, D, 4)
    # softplus(sqrt(D) * 1/sqrt(D)) = softplus(1) ~ 1.313 (docs/design/layers.md#s4-preconditioners)
    assert torch.allclose(pre.diagonal(), torch.full((2, D), 1.3132616875), atol=1e-6)
    assert pre.v.abs().max() == 0 and 0.01 < pre.u.std() < 0.03


def test_default_rank_comes_from_the_sublayer():
    pre = build_preconditioner(PreconditionerConfig("diag_lowrank"), 32, None, default_rank=16)
    assert pre.u.shape == (32, 16)
