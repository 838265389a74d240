"""mstrain.kernels.optim: the one-pass momentum and Adam updates give their numpy references' bits."""
import numpy as np
import pytest

from mstrain import kernels
from mstrain.kernels.optim import adam_step, adam_update, momentum_update, reference_momentum_update, update_moments

needs_kernel = pytest.mark.skipif(not kernels.available("momentum_update"), reason="optim kernel not built")


def _arrays(rng, shape, dtype):
    param = rng.standard_normal(shape).astype(dtype)
    accum = (rng.standard_normal(shape) * 0.1).astype(dtype)
    grad = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e3], size=shape)).astype(dtype)
    return param, accum, grad


@needs_kernel
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("shape", [(128, 784), (7,), (3, 5, 11)])
def test_momentum_update_is_the_numpy_reference_bit_for_bit(dtype, nesterov, shape):
    rng = np.random.default_rng(sum(shape))
    param, accum, grad = _arrays(rng, shape, dtype)
    want_param, want_accum = param.copy(), accum.copy()
    for step in range(3):  # the state carries over
        lr, momentum = 0.01 * (step + 1), 0.9
        reference_momentum_update(want_param, want_accum, grad, lr, momentum, nesterov)
        assert momentum_update(param, accum, grad, lr, momentum, nesterov) is param
        np.testing.assert_array_equal(accum.view(np.uint8), want_accum.view(np.uint8))
        np.testing.assert_array_equal(param.view(np.uint8), want_param.view(np.uint8))


@needs_kernel
def test_momentum_update_matches_the_formula_and_falls_back_for_other_layouts(monkeypatch):
    rng = np.random.default_rng(1)
    param, accum, grad = _arrays(rng, (40, 30), np.float64)
    want_accum = accum * 0.5 + grad
    want_param = param - 0.1 * want_accum
    momentum_update(param, accum, grad, 0.1, 0.5)
    np.testing.assert_allclose(accum, want_accum, rtol=1e-15)
    np.testing.assert_allclose(param, want_param, rtol=1e-15)
    # a transposed gradient, a float32 gradient for float64 state, the kernels turned off: numpy's path
    for grad_in, disabled in ((grad.T.copy().T, "0"), (grad.astype(np.float32), "0"), (grad, "1")):
        monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", disabled)
        p, a = param.copy(), accum.copy()
        wp, wa = param.copy(), accum.copy()
        momentum_update(p, a, grad_in, 0.1, 0.5)
        reference_momentum_update(wp, wa, grad_in, 0.1, 0.5)
        np.testing.assert_array_equal(p, wp)
        np.testing.assert_array_equal(a, wa)


@needs_kernel
def test_momentum_update_names_its_bad_inputs():
    from mstrain.kernels.optim import _native
    native = _native("momentum_update")
    param = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="differ in size"):
        native(param, np.zeros(4, np.float32), np.zeros(3, np.float32), 0.1, 0.9, False)
    with pytest.raises(TypeError, match="accum has dtype float64"):
        native(param, np.zeros(4, np.float64), np.zeros(4, np.float32), 0.1, 0.9, False)


@needs_kernel
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("shape", [(128, 784), (7,), (3, 5, 11)])
def test_adam_update_is_the_numpy_reference_bit_for_bit(dtype, nesterov, shape):
    rng = np.random.default_rng(sum(shape) + 1)
    param, m, grad = _arrays(rng, shape, dtype)
    v = np.abs(m) * 0.01
    want_param, want_m, want_v = param.copy(), m.copy(), v.copy()
    for step in range(1, 4):  # the state carries over; a tiny eps and a large one
        lr_t, beta1, beta2, eps = 0.001 * step, 0.9, 0.999, (1e-8, 1e-3, 1e-8)[step - 1]
        scratch = np.empty_like(want_param)
        update_moments(want_m, want_v, grad, beta1, beta2, scratch)
        adam_step(want_param, want_m, want_v, grad, lr_t, eps, beta1, nesterov, scratch)
        assert adam_update(param, m, v, grad, lr_t, beta1, beta2, eps, nesterov) is param
        for got, want in ((m, want_m), (v, want_v), (param, want_param)):
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@needs_kernel
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("decay, denom_scale", [(0.99, 1.0), (None, 1.7), (0.995, 1.3)])
def test_adam_with_decoupled_decay_and_scaled_root_is_the_numpy_reference_bit_for_bit(dtype, decay, denom_scale):
    """AdamWeightDecay (param first multiplied by 1 - lr wd) and AdamW's bias correction (sqrt(v)
    scaled) in the one pass, against numpy's sequence of the two."""
    rng = np.random.default_rng(5)
    param, m, grad = _arrays(rng, (64, 33), dtype)
    v = np.abs(m) * 0.01
    want_param, want_m, want_v = param.copy(), m.copy(), v.copy()
    for _ in range(3):
        if decay is not None:
            want_param *= decay
        scratch = np.empty_like(want_param)
        update_moments(want_m, want_v, grad, 0.9, 0.999, scratch)
        adam_step(want_param, want_m, want_v, grad, 0.002, 1e-6, 0.9, False, scratch, denom_scale)
        adam_update(param, m, v, grad, 0.002, 0.9, 0.999, 1e-6, decay=decay, denom_scale=denom_scale)
        for got, want in ((m, want_m), (v, want_v), (param, want_param)):
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@needs_kernel
def test_adam_update_falls_back_and_names_its_bad_inputs(monkeypatch):
    from mstrain.kernels.optim import _native
    rng = np.random.default_rng(2)
    param, m, grad = _arrays(rng, (20, 9), np.float32)
    v = np.abs(m)
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    p, mm, vv = param.copy(), m.copy(), v.copy()
    adam_update(p, mm, vv, grad, 0.01, 0.9, 0.99, 1e-8)
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "0")
    adam_update(param, m, v, grad, 0.01, 0.9, 0.99, 1e-8)
    np.testing.assert_array_equal(param, p)
    np.testing.assert_array_equal(v, vv)
    native = _native("adam_update")
    with pytest.raises(ValueError, match="differ in size"):
        native(param, m, v, grad[:3], 0.01, 0.9, 0.99, 0.1, 0.01, 1e-8, False, 1.0, False, 1.0, False)
    with pytest.raises(TypeError, match="v has dtype float64"):
        native(param, m, v.astype(np.float64), grad, 0.01, 0.9, 0.99, 0.1, 0.01, 1e-8, False, 1.0, False, 1.0, False)
