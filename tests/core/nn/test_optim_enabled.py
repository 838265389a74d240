"""`optimizer(grads, enabled)`: a false flag writes nothing (parameters, state, global_step), a true
one is the plain update bit for bit, eagerly and compiled (GRAPH_MODE, the expanders' `where`)."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Parameter, Tensor, nn

OPTIMIZERS = [
    (nn.Momentum, dict(learning_rate=0.1, momentum=0.9, weight_decay=0.01)),
    (nn.SGD, dict(learning_rate=0.1, momentum=0.9, dampening=0.1)),
    (nn.SGD, dict(learning_rate=0.1)),
    (nn.Adam, dict(learning_rate=0.01)),
    (nn.Adam, dict(learning_rate=0.01, use_amsgrad=True)),
    (nn.AdamWeightDecay, dict(learning_rate=0.01, weight_decay=0.1)),
    (nn.AdamW, dict(learning_rate=0.01, weight_decay=0.1)),
    (nn.LazyAdam, dict(learning_rate=0.01)),
]


def _setup(cls, kwargs):
    rng = np.random.default_rng(0)
    params = [Parameter(rng.standard_normal((3, 4)).astype(np.float32), name="w"),
              Parameter(rng.standard_normal(4).astype(np.float32), name="b")]
    opt = cls(params, **kwargs)
    grads = tuple(Tensor(rng.standard_normal(p.shape).astype(np.float32)) for p in params)
    return opt, grads


def _state(opt):
    return {p.name: p.asnumpy().copy() for p in opt.get_parameters()} | {
        p.name: p.asnumpy().copy() for p in opt.parameters}


def _stepper(opt, grads, graph):
    """run(flags): one update per flag (None: no flag), through one jit function when `graph`."""
    def step(*args):
        *g, flag = args
        return opt(tuple(g), flag)
    fn = ms.jit(step) if graph else step

    def run(flags):
        for flag in flags:
            fn(*grads, None if flag is None else Tensor(np.array(flag)))
    return run


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("cls, kwargs", OPTIMIZERS)
def test_a_false_flag_writes_nothing_and_a_true_one_is_the_plain_update(cls, kwargs, graph, monkeypatch):
    monkeypatch.setenv("MSTRAIN_DISABLE_FUSION", "1")
    reference, grads = _setup(cls, kwargs)
    _stepper(reference, grads, graph=False)([None, None])
    flagged, grads = _setup(cls, kwargs)
    compiled_before = ms.jit_compile_count()
    run = _stepper(flagged, grads, graph)
    run([True])
    after_one = _state(flagged)
    run([False, False])  # skipped: nothing changes, step count included
    for name, value in after_one.items():
        np.testing.assert_array_equal(_state(flagged)[name], value, err_msg=name)
    run([True])
    assert ms.jit_compile_count() - compiled_before == (1 if graph else 0)  # one graph, any flag
    for name, value in _state(reference).items():
        np.testing.assert_array_equal(_state(flagged)[name], value, err_msg=name)


def test_an_optimizer_without_flag_support_rejects_one():
    class Plain(nn.Optimizer):
        def _update(self, grads, lrs, step, attrs):
            return None
    opt = Plain(0.1, [Parameter(np.zeros(2, np.float32), name="p")])
    with pytest.raises(TypeError, match="conditional update"):
        opt((Tensor(np.zeros(2, np.float32)),), Tensor(np.array(True)))
