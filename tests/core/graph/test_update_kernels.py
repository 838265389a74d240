"""Optimizer updates: each one in-place update primitive becomes ONE generated kernel writing
parameter and state where they live, with the numbers of the numpy update kernel."""
import shutil

import numpy as np
import pytest

import mstrain as ms
from mstrain.nn.optim import _kernels as K
from mstrain.ops.primitive import apply

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

CASES = [
    ("apply_gradient_descent", 0, False, dict(weight_decay=0.01, grad_scale=0.5)),
    ("apply_momentum", 1, False, dict(momentum=0.9, use_nesterov=False, weight_decay=0.0, grad_scale=1.0)),
    ("apply_momentum", 1, False, dict(momentum=0.8, use_nesterov=True, weight_decay=1e-3, grad_scale=0.25)),
    ("apply_sgd", 1, True, dict(momentum=0.9, dampening=0.1, nesterov=False, weight_decay=0.0, grad_scale=1.0)),
    ("apply_sgd", 1, True, dict(momentum=0.9, dampening=0.0, nesterov=True, weight_decay=0.01, grad_scale=1.0)),
    ("apply_adam", 2, True, dict(beta1=0.9, beta2=0.999, eps=1e-8, use_nesterov=False, weight_decay=0.0,
                                 grad_scale=1.0)),
    ("apply_adam", 2, True, dict(beta1=0.8, beta2=0.99, eps=1e-6, use_nesterov=True, weight_decay=0.01,
                                 grad_scale=0.5)),
    ("apply_adam_weight_decay", 2, True, dict(beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
                                              bias_correction=True, grad_scale=1.0)),
    ("apply_adam_weight_decay", 2, True, dict(beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0,
                                              bias_correction=False, grad_scale=2.0)),
]


def _state(shape, count, seed):
    rng = np.random.default_rng(seed)
    param = ms.Parameter(rng.standard_normal(shape).astype(np.float32), name="p")
    states = [ms.Parameter(np.abs(rng.standard_normal(shape)).astype(np.float32) * 0.1, name=f"s{k}",
                           requires_grad=False) for k in range(count)]
    step = ms.Parameter(np.array(0, np.int32), name="step", requires_grad=False)
    lr = ms.Parameter(np.array(0.05, np.float32), name="lr", requires_grad=False)
    return param, states, step, lr


def _update(prim, param, states, step, lr, grad, uses_step, attrs):
    t = apply(K.increment_step, step)
    args = [param, *states, grad, lr] + ([t] if uses_step else [])
    apply(prim, *args, **attrs)
    return ms.ops.sum(param)  # something to return; the update is the point


@pytest.mark.parametrize("name, count, uses_step, attrs", CASES)
@pytest.mark.parametrize("shape", [(37, 19), (1000,)])
def test_update_is_one_kernel_with_numpy_numbers(name, count, uses_step, attrs, shape):
    prim = getattr(K, {"apply_gradient_descent": "apply_gradient_descent"}.get(name, name))
    grads = [np.random.default_rng(10 + k).standard_normal(shape).astype(np.float32) for k in range(4)]
    eager = _state(shape, count, 0)
    for g in grads:
        _update(prim, *eager, ms.Tensor(g), uses_step, attrs)
    compiled = _state(shape, count, 0)
    f = ms.jit(lambda g: _update(prim, *compiled, g, uses_step, attrs))
    for g in grads:
        f(ms.Tensor(g))
    graph = f.graphs()[0]
    updates = [n for n in graph.nodes if n.op == "fused" and n.value.assigned
               and any(target.value is compiled[0] for _, target in n.value.assigned)]
    assert len(updates) == 1 and len(updates[0].value.assigned) == count + 1
    assert graph.count(prim=name) == 0
    for a, b in zip([eager[0], *eager[1]], [compiled[0], *compiled[1]]):
        np.testing.assert_allclose(b.asnumpy(), a.asnumpy(), rtol=2e-6, atol=1e-7)
    assert int(compiled[2].asnumpy()) == len(grads)


def _guarded_update(prim, param, states, step, lr, grad, attrs):
    """A loss-scaled step in miniature: the unscaled gradient feeds both the overflow guard (read
    before the step increments) and the update (which reads the incremented step)."""
    unscaled = grad * 0.5
    enabled = ms.ops.isfinite(ms.ops.sum(unscaled * 0.0))
    t = apply(K.increment_step, step, enabled)
    apply(prim, param, *states, unscaled, lr, t, enabled, **attrs)
    return ms.ops.sum(param)


@pytest.mark.parametrize("name, count, uses_step, attrs", [c for c in CASES if c[2]])
def test_a_guarded_update_reads_the_step_its_increment_wrote(name, count, uses_step, attrs):
    """The increment is fused with the guard, which needs the gradient kernel the update shares:
    the update's step-dependent numbers must still come after the write (at t = 0 Adam's bias
    correction is 0 / 0 and every weight turned NaN)."""
    prim = getattr(K, name)
    grads = [np.random.default_rng(20 + k).standard_normal((37, 19)).astype(np.float32) for k in range(3)]
    grads[1][0, 0] = np.inf  # an overflowed step writes nothing
    eager, compiled = _state((37, 19), count, 0), _state((37, 19), count, 0)
    f = ms.jit(lambda g: _guarded_update(prim, *compiled, g, attrs))
    with np.errstate(invalid="ignore"):  # inf * 0 is the overflow check
        for g in grads:
            _guarded_update(prim, *eager, ms.Tensor(g), attrs)
            f(ms.Tensor(g))
    assert f.graphs()[0].count(op="fused") > 0
    assert int(compiled[2].asnumpy()) == int(eager[2].asnumpy()) == 2
    for a, b in zip([eager[0], *eager[1]], [compiled[0], *compiled[1]]):
        assert np.isfinite(b.asnumpy()).all()
        np.testing.assert_allclose(b.asnumpy(), a.asnumpy(), rtol=2e-6, atol=1e-7)
