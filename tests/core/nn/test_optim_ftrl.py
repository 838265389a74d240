"""nn.FTRL against a float64 loop of the FTRL-Proximal equations (McMahan et al., 2013)."""
import numpy as np
import pytest

from mstrain import Parameter, Tensor, nn
from mstrain.errors import ConfigError


def _ftrl_loop(w, grads, lr, l1, l2, lr_power, initial_accum):
    """Per-coordinate scalar loop; rows whose gradient is all zero are skipped (lazy)."""
    w = w.astype(np.float64).copy()
    n = np.full_like(w, initial_accum)
    z = np.zeros_like(w)
    for g in grads:
        for r in range(w.shape[0]):
            if not np.any(g[r]):
                continue
            for c in range(w.shape[1]):
                gi = float(g[r, c])
                n_new = n[r, c] + gi * gi
                sigma = (n_new ** -lr_power - n[r, c] ** -lr_power) / lr
                z[r, c] += gi - sigma * w[r, c]
                n[r, c] = n_new
                if abs(z[r, c]) <= l1:
                    w[r, c] = 0.0
                else:
                    w[r, c] = (np.sign(z[r, c]) * l1 - z[r, c]) / (n_new ** -lr_power / lr + 2 * l2)
    return w, n, z


@pytest.mark.parametrize("l1,l2,lr_power", [(0.0, 0.0, -0.5), (0.05, 0.1, -0.5), (0.01, 0.0, -0.3)])
def test_ftrl_matches_the_scalar_loop_and_skips_untouched_rows(l1, l2, lr_power):
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(6, 3)).astype(np.float32)
    grads = []
    for step in range(4):
        g = rng.normal(size=(6, 3)).astype(np.float32)
        g[[step % 6, 5]] = 0.0  # row 5 is never touched; one more row rests each step
        grads.append(g)
    param = Parameter(Tensor(w0.copy()), name="w")
    opt = nn.FTRL([param], initial_accum=0.1, learning_rate=0.5, lr_power=lr_power, l1=l1, l2=l2)
    for g in grads:
        opt((Tensor(g),))
    want_w, want_n, want_z = _ftrl_loop(w0, grads, 0.5, l1, l2, lr_power, 0.1)
    np.testing.assert_allclose(param.asnumpy(), want_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(opt.accum[0].asnumpy(), want_n, rtol=1e-5)
    np.testing.assert_allclose(opt.linear[0].asnumpy(), want_z, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(param.asnumpy()[5], w0[5])  # untouched row: value kept exactly


def test_ftrl_l1_makes_weights_exactly_zero():
    param = Parameter(Tensor(np.ones((2, 2), np.float32)), name="w")
    opt = nn.FTRL([param], learning_rate=0.1, l1=10.0)
    opt((Tensor(np.full((2, 2), 0.01, np.float32)),))
    assert np.all(param.asnumpy() == 0.0)


def test_ftrl_refuses_bad_hyper_parameters():
    param = Parameter(Tensor(np.ones(2, np.float32)), name="w")
    with pytest.raises(ConfigError, match="l1"):
        nn.FTRL([param], l1=-1.0)
    with pytest.raises(ConfigError, match="lr_power"):
        nn.FTRL([param], lr_power=0.5)
