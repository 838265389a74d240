"""One checker for every op: value against a numpy reference, VJP against central differences.

`check_op(fn, ref, inputs)` runs `fn` on Tensors made from `inputs` (float64 numpy arrays for the
differentiable ones; integer arrays and other constants pass through untouched), compares the
result with `ref(*inputs)`, then compares the gradient of `sum(fn(...) * w)` (w a random
cotangent) with central finite differences of the op's own forward. `check_second_order` does the
same one level up: the gradient of the gradient against finite differences of the gradient.
"""
import numpy as np

import mstrain as ms
from mstrain import Tensor

EPS = 1e-6


def _is_diff(a):
    return isinstance(a, np.ndarray) and a.dtype.kind == "f"


def _as_outputs(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _tensors(inputs):
    return [Tensor(a) if isinstance(a, np.ndarray) else a for a in inputs]


def _forward_np(fn, inputs):
    """The op's outputs as float64 arrays, outside any gradient (used for finite differences)."""
    return [np.asarray(o.asnumpy(), dtype=np.float64) for o in _as_outputs(fn(*_tensors(inputs)))]


def _weighted_loss(fn, cotangents, float_outputs):
    def loss(*args):
        outs = _as_outputs(fn(*args))
        total = None
        for i in float_outputs:
            term = ms.ops.sum(outs[i] * Tensor(cotangents[i]))
            total = term if total is None else total + term
        return total
    return loss


def _numeric_grad(scalar_fn, inputs, position):
    x = inputs[position]
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for k in range(flat.size):
        saved = flat[k]
        flat[k] = saved + EPS
        up = scalar_fn(inputs)
        flat[k] = saved - EPS
        down = scalar_fn(inputs)
        flat[k] = saved
        gflat[k] = (up - down) / (2 * EPS)
    return grad


def _analytic_grads(loss, inputs, positions):
    grads = ms.grad(loss, grad_position=tuple(positions))(*_tensors(inputs))
    return [g.asnumpy() for g in grads]


def check_op(fn, ref, inputs, grad_positions=None, rtol=1e-5, atol=1e-6, grad_rtol=1e-4,
             grad_atol=1e-5, seed=0):
    """Assert fn(*inputs) == ref(*inputs) and that fn's VJP matches central differences.

    `grad_positions` defaults to every float input; `ref=None` skips the value check.
    Returns the gradients (for extra assertions).
    """
    rng = np.random.default_rng(seed)
    inputs = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
    outs = _as_outputs(fn(*_tensors(inputs)))
    if ref is not None:
        expected = _as_outputs(ref(*inputs))
        assert len(outs) == len(expected), f"{len(outs)} outputs, reference has {len(expected)}"
        for o, e in zip(outs, expected):
            assert o.shape == np.shape(e), f"shape {o.shape} != reference {np.shape(e)}"
            np.testing.assert_allclose(o.asnumpy(), e, rtol=rtol, atol=atol)
    float_outputs = [i for i, o in enumerate(outs) if o.dtype.kind == "f"]
    positions = [i for i, a in enumerate(inputs) if _is_diff(a)] if grad_positions is None else grad_positions
    if not positions or not float_outputs:
        return []
    cotangents = {i: rng.standard_normal(outs[i].shape) for i in float_outputs}
    analytic = _analytic_grads(_weighted_loss(fn, cotangents, float_outputs), inputs, positions)

    def scalar(xs):
        values = _forward_np(fn, xs)
        return sum(float(np.sum(values[i] * cotangents[i])) for i in float_outputs)

    for pos, got in zip(positions, analytic):
        assert got.shape == inputs[pos].shape, f"grad of input {pos}: shape {got.shape} != {inputs[pos].shape}"
        want = _numeric_grad(scalar, inputs, pos)
        np.testing.assert_allclose(got, want, rtol=grad_rtol, atol=grad_atol,
                                   err_msg=f"VJP of input {pos} disagrees with finite differences")
    return analytic


def check_second_order(fn, inputs, position=0, rtol=1e-4, atol=1e-5, seed=1):
    """Assert d/dx <v, d/dx <w, fn(x)>> equals finite differences of the first gradient."""
    rng = np.random.default_rng(seed)
    inputs = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
    out = _as_outputs(fn(*_tensors(inputs)))[0]
    w = rng.standard_normal(out.shape)
    v = rng.standard_normal(inputs[position].shape)

    def first_grad(*args):
        g = ms.grad(lambda *a: ms.ops.sum(_as_outputs(fn(*a))[0] * Tensor(w)), grad_position=position)(*args)
        return ms.ops.sum(g * Tensor(v))

    got = ms.grad(first_grad, grad_position=position)(*_tensors(inputs)).asnumpy()

    def scalar(xs):
        return float(first_grad(*_tensors(xs)).asnumpy())

    want = _numeric_grad(scalar, inputs, position)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol,
                               err_msg="second-order VJP disagrees with finite differences")
    return got
