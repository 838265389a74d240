"""Gradient checks for Cells: value_and_grad against central finite differences (float64)."""
import numpy as np

import mstrain as ms
from mstrain import Tensor

EPS = 1e-6


def _loss_value(cell, inputs, cotangent):
    # not under no_grad: a cell may take gradients inside its construct (second-order checks)
    out = cell(*[Tensor(a) if isinstance(a, np.ndarray) else a for a in inputs])
    return float(np.sum(out.asnumpy().astype(np.float64) * cotangent))


def _central_difference(array, evaluate):
    grad = np.zeros_like(array, dtype=np.float64)
    flat, gflat = array.reshape(-1), grad.reshape(-1)
    for k in range(flat.size):
        saved = flat[k]
        flat[k] = saved + EPS
        up = evaluate()
        flat[k] = saved - EPS
        down = evaluate()
        flat[k] = saved
        gflat[k] = (up - down) / (2 * EPS)
    return grad


def check_cell_grads(cell, inputs, float_positions=(0,), rtol=1e-5, atol=1e-7, seed=0):
    """Compare d sum(cell(*inputs) * w)/d(params, float inputs) with finite differences.

    `inputs` are numpy arrays (float64 for the differentiated ones) or constants.
    """
    params = cell.trainable_params()
    out = cell(*[Tensor(a) if isinstance(a, np.ndarray) else a for a in inputs])
    cotangent = np.random.default_rng(seed).standard_normal(out.shape)

    def loss(*args):
        return ms.ops.sum(cell(*args) * Tensor(cotangent))

    positions = tuple(float_positions) if float_positions else None
    grad_fn = ms.value_and_grad(loss, grad_position=positions, weights=params)
    _, grads = grad_fn(*[Tensor(a) if isinstance(a, np.ndarray) else a for a in inputs])
    input_grads, param_grads = grads if positions else ((), grads)
    for pos, g in zip(float_positions or (), input_grads):
        expected = _central_difference(inputs[pos], lambda: _loss_value(cell, inputs, cotangent))
        np.testing.assert_allclose(g.asnumpy(), expected, rtol=rtol, atol=atol, err_msg=f"input {pos}")
    for p, g in zip(params, param_grads):
        expected = _central_difference(p.asnumpy(), lambda: _loss_value(cell, inputs, cotangent))
        np.testing.assert_allclose(g.asnumpy(), expected, rtol=rtol, atol=atol, err_msg=p.name)
