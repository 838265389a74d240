"""Optimizers against hand-written numpy references of the same algorithms (5 steps, float64)."""
import math

import numpy as np
import pytest

import mstrain as ms
from mstrain import Parameter, Tensor, nn
from mstrain.errors import ConfigError
from mstrain.ops.primitive import REGISTRY

from ...torch_support import import_torch

STEPS = 5


def _params():
    rng = np.random.default_rng(0)
    return [Parameter(rng.standard_normal((4, 3)), name="w"), Parameter(rng.standard_normal(3), name="b")]


def _grads(params, seed=1):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(p.shape) for p in params] for _ in range(STEPS)]


def _run(optimizer_cls, kwargs, reference, rtol=1e-12):
    """Step the optimizer and the reference on the same gradients; compare after every step."""
    params = _params()
    expected = [p.asnumpy().copy() for p in params]
    state = {}
    opt = optimizer_cls(params, **kwargs)
    for t, grads in enumerate(_grads(params), start=1):
        opt(tuple(Tensor(g) for g in grads))
        for i, g in enumerate(grads):
            expected[i] = reference(expected[i], g, t, state.setdefault(i, {}))
        for p, e in zip(params, expected):
            np.testing.assert_allclose(p.asnumpy(), e, rtol=rtol, atol=1e-14, err_msg=f"{p.name} step {t}")
    assert int(opt.global_step.asnumpy()) == STEPS
    return opt


def _sgd_ref(lr, momentum=0.0, dampening=0.0, nesterov=False, wd=0.0):
    def step(p, g, t, s):
        g = g + wd * p
        if momentum:
            s["buf"] = g.copy() if t == 1 else momentum * s["buf"] + (1 - dampening) * g
            g = g + momentum * s["buf"] if nesterov else s["buf"]
        return p - lr * g
    return step


def _momentum_ref(lr, momentum, nesterov=False, wd=0.0):
    def step(p, g, t, s):
        g = g + wd * p
        s["acc"] = momentum * s.get("acc", 0.0) + g
        return p - lr * (g + momentum * s["acc"] if nesterov else s["acc"])
    return step


def _adam_ref(lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, amsgrad=False, nesterov=False):
    def step(p, g, t, s):
        g = g + wd * p
        s["m"] = b1 * s.get("m", 0.0) + (1 - b1) * g
        s["v"] = b2 * s.get("v", 0.0) + (1 - b2) * g * g
        denom_v = s["v"]
        if amsgrad:
            s["vhat"] = denom_v = np.maximum(s.get("vhat", 0.0), s["v"])
        lr_t = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        numer = b1 * s["m"] + (1 - b1) * g if nesterov else s["m"]
        return p - lr_t * numer / (np.sqrt(denom_v) + eps)
    return step


def _adam_weight_decay_ref(lr, b1, b2, eps, wd, bias_correction):
    def step(p, g, t, s):
        s["m"] = b1 * s.get("m", 0.0) + (1 - b1) * g
        s["v"] = b2 * s.get("v", 0.0) + (1 - b2) * g * g
        if bias_correction:  # PyTorch AdamW
            p = p * (1 - lr * wd)
            denom = np.sqrt(s["v"]) / math.sqrt(1 - b2 ** t) + eps
            return p - lr / (1 - b1 ** t) * s["m"] / denom
        return p - lr * (s["m"] / (np.sqrt(s["v"]) + eps) + wd * p)  # MindSpore AdamWeightDecay
    return step


# learning rates are exact in float32 (the static rate is a float32 Parameter, as MindSpore's)
CASES = [
    ("sgd", nn.SGD, dict(learning_rate=0.125), _sgd_ref(0.125)),
    ("sgd_momentum_dampening_wd", nn.SGD, dict(learning_rate=0.0625, momentum=0.9, dampening=0.2, weight_decay=0.01),
     _sgd_ref(0.0625, 0.9, 0.2, wd=0.01)),
    ("sgd_nesterov", nn.SGD, dict(learning_rate=0.0625, momentum=0.8, nesterov=True), _sgd_ref(0.0625, 0.8, nesterov=True)),
    ("momentum", nn.Momentum, dict(learning_rate=0.0078125, momentum=0.9), _momentum_ref(0.0078125, 0.9)),
    ("momentum_nesterov_wd", nn.Momentum, dict(learning_rate=0.0078125, momentum=0.9, use_nesterov=True, weight_decay=0.1),
     _momentum_ref(0.0078125, 0.9, True, 0.1)),
    ("adam", nn.Adam, dict(learning_rate=0.0078125), _adam_ref(0.0078125)),
    ("adam_wd_betas", nn.Adam, dict(learning_rate=0.015625, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.05),
     _adam_ref(0.015625, 0.8, 0.99, 1e-6, 0.05)),
    ("adam_amsgrad", nn.Adam, dict(learning_rate=0.0078125, use_amsgrad=True), _adam_ref(0.0078125, amsgrad=True)),
    ("adam_nesterov", nn.Adam, dict(learning_rate=0.0078125, use_nesterov=True), _adam_ref(0.0078125, nesterov=True)),
    ("adam_weight_decay", nn.AdamWeightDecay, dict(learning_rate=0.0078125, weight_decay=0.1),
     _adam_weight_decay_ref(0.0078125, 0.9, 0.999, 1e-6, 0.1, False)),
    ("adamw", nn.AdamW, dict(lr=0.0078125, betas=(0.9, 0.95), weight_decay=0.1),
     _adam_weight_decay_ref(0.0078125, 0.9, 0.95, 1e-8, 0.1, True)),
    ("lazy_adam_dense_grads", nn.LazyAdam, dict(learning_rate=0.0078125), _adam_ref(0.0078125)),
]


@pytest.mark.parametrize("name,cls,kwargs,reference", CASES, ids=[c[0] for c in CASES])
def test_optimizer_matches_numpy_reference(name, cls, kwargs, reference):
    _run(cls, kwargs, reference)


def test_adamw_defaults_are_pytorchs():
    opt = nn.AdamW(_params())
    assert (opt.beta1, opt.beta2, opt.eps, opt.weight_decay) == (0.9, 0.999, 1e-8, (0.01, 0.01))
    assert nn.AdamWeightDecay(_params()).eps == 1e-6


def test_updates_are_in_place_single_primitives():
    params = _params()
    storage = [p.asnumpy() for p in params]
    opt = nn.Adam(params, 0.01)
    opt(tuple(Tensor(g) for g in _grads(params)[0]))
    assert all(p.asnumpy() is s for p, s in zip(params, storage))
    for name in ("apply_sgd", "apply_momentum", "apply_adam", "apply_adam_weight_decay", "apply_lazy_adam"):
        prim = REGISTRY[name]
        assert not prim.differentiable and 0 in prim.mutates


def test_state_parameters_are_named_and_saved_with_the_train_cell():
    net = nn.Dense(3, 2)
    opt = nn.Adam(net.trainable_params(), 0.01, use_amsgrad=True)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
    names = list(train.parameters_dict())
    assert names[:2] == ["weight", "bias"]
    for expected in ("global_step", "learning_rate", "moment1.weight", "moment2.bias", "vhat.weight"):
        assert expected in names
    assert opt.global_step.dtype == ms.int32 and opt.global_step.shape == ()
    assert not any(p.requires_grad for p in opt.moment1)
    assert [p.name for p in train.trainable_params()] == ["weight", "bias"]


def test_resume_from_saved_state_is_bit_identical():
    grads = _grads(_params(), seed=5)

    def fresh():
        params = _params()
        return params, nn.AdamW(params, 0.01, weight_decay=0.1)

    params, opt = fresh()
    for g in grads:
        opt(tuple(Tensor(x) for x in g))
    final = [p.asnumpy().copy() for p in params]

    params, opt = fresh()
    for g in grads[:3]:
        opt(tuple(Tensor(x) for x in g))
    saved = {name: p.asnumpy().copy() for name, p in opt.parameters_dict().items()}
    params, resumed = fresh()
    for name, p in resumed.parameters_dict().items():
        p.set_data(saved[name])
    for g in grads[3:]:
        resumed(tuple(Tensor(x) for x in g))
    for p, f in zip(params, final):
        np.testing.assert_array_equal(p.asnumpy(), f)


def test_lazy_adam_updates_only_touched_rows():
    table = Parameter(np.random.default_rng(0).standard_normal((6, 3)), name="table")
    opt = nn.LazyAdam([table], learning_rate=0.125, weight_decay=0.01)
    expected = table.asnumpy().copy()
    m, v = np.zeros_like(expected), np.zeros_like(expected)
    rng = np.random.default_rng(1)
    for t, rows in enumerate([[1, 4], [4], [0, 1, 5]], start=1):
        g = np.zeros_like(expected)
        g[rows] = rng.standard_normal((len(rows), 3))
        g[rows[0], 0] = 0.0  # a touched row may hold zeros
        opt((Tensor(g),))
        gr = g[rows] + 0.01 * expected[rows]
        m[rows] = 0.9 * m[rows] + 0.1 * gr
        v[rows] = 0.999 * v[rows] + 0.001 * gr * gr
        lr_t = 0.125 * math.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        expected[rows] -= lr_t * m[rows] / (np.sqrt(v[rows]) + 1e-8)
        np.testing.assert_allclose(table.asnumpy(), expected, rtol=1e-12)
        np.testing.assert_allclose(opt.moment1[0].asnumpy(), m, rtol=1e-12)
        np.testing.assert_allclose(opt.moment2[0].asnumpy(), v, rtol=1e-12)
    untouched = 2
    assert np.all(opt.moment1[0].asnumpy()[untouched] == 0)


def test_groups_with_own_weight_decay_and_learning_rate():
    params = _params()
    groups = [{"params": [params[0]], "weight_decay": 0.1, "lr": 0.0625},
              {"params": [params[1]]},
              {"order_params": [params[1], params[0]]}]
    opt = nn.Momentum(groups, learning_rate=0.0078125, momentum=0.9, weight_decay=0.0)
    assert [p.name for p in opt.parameters] == ["b", "w"]
    assert opt.weight_decay == (0.0, 0.1) and opt.is_group_lr
    lrs = opt.get_lr()
    assert [float(lr.asnumpy()) for lr in lrs] == [0.0078125, 0.0625]
    refs = [_momentum_ref(0.0078125, 0.9), _momentum_ref(0.0625, 0.9, wd=0.1)]
    expected = [params[1].asnumpy().copy(), params[0].asnumpy().copy()]
    states = [{}, {}]
    for grads in _grads(params):
        ordered = [grads[1], grads[0]]
        opt(tuple(Tensor(g) for g in ordered))
        for i in range(2):
            expected[i] = refs[i](expected[i], ordered[i], 0, states[i])
    np.testing.assert_allclose(params[1].asnumpy(), expected[0], rtol=1e-12)
    np.testing.assert_allclose(params[0].asnumpy(), expected[1], rtol=1e-12)


def test_group_and_parameter_errors():
    params = _params()
    with pytest.raises(ConfigError, match="appears twice"):
        nn.SGD([params[0], params[0]])
    with pytest.raises(ConfigError, match="empty"):
        nn.SGD([])
    with pytest.raises(ConfigError, match="keys must be"):
        nn.SGD([{"params": params, "momentum": 0.9}])
    with pytest.raises(ConfigError, match="share the name"):
        nn.SGD([Parameter(np.zeros(1), name="x"), Parameter(np.zeros(1), name="x")])
    with pytest.raises(ConfigError, match="learning_rate"):
        nn.SGD(params, learning_rate=-1.0)
    with pytest.raises(ValueError, match="3 gradients for 2"):
        nn.SGD(params)((Tensor(np.zeros(1)),) * 3)


def test_loss_scale_divides_gradients():
    scale = 128.0
    params = _params()
    expected = [p.asnumpy().copy() for p in params]
    opt = nn.Momentum(params, 0.0078125, 0.9, loss_scale=scale)
    ref, states = _momentum_ref(0.0078125, 0.9), [{}, {}]
    for grads in _grads(params):
        opt(tuple(Tensor(g * scale) for g in grads))
        expected = [ref(e, g, 0, s) for e, g, s in zip(expected, grads, states)]
    for p, e in zip(params, expected):
        np.testing.assert_allclose(p.asnumpy(), e, rtol=1e-12)


def test_per_step_learning_rates_and_schedules_follow_global_step():
    lrs = [0.125, 0.0625, 0.03125]
    params = _params()
    opt = nn.SGD(params, learning_rate=lrs)
    expected = params[0].asnumpy().copy()
    for t, grads in enumerate(_grads(params)):
        assert float(opt.get_lr().asnumpy()) == pytest.approx(lrs[min(t, 2)])
        opt(tuple(Tensor(g) for g in grads))
        expected = expected - lrs[min(t, 2)] * grads[0]
    np.testing.assert_allclose(params[0].asnumpy(), expected, rtol=1e-12)

    schedule = nn.CosineDecayLR(0.01, 0.1, 4)
    params = _params()
    opt = nn.SGD(params, learning_rate=schedule)
    assert opt.dynamic_lr
    expected = params[1].asnumpy().copy()
    for t, grads in enumerate(_grads(params)):
        lr = 0.01 + 0.5 * 0.09 * (1 + math.cos(math.pi * min(t, 4) / 4))
        opt(tuple(Tensor(g) for g in grads))
        expected = expected - lr * grads[1]
    np.testing.assert_allclose(params[1].asnumpy(), expected, rtol=1e-6)


def test_static_learning_rate_is_an_assignable_parameter():
    params = _params()
    opt = nn.SGD(params, learning_rate=0.1)
    opt.learning_rate.set_data(np.array(0.5))
    before = params[1].asnumpy().copy()
    g = np.ones(3)
    opt((Tensor(np.zeros((4, 3))), Tensor(g)))
    np.testing.assert_allclose(params[1].asnumpy(), before - 0.5 * g, rtol=1e-6)


def test_clip_by_global_norm_function_and_grad_clip_option():
    grads = [np.array([3.0, 0.0]), np.array([[0.0, 4.0]])]  # global norm 5
    clipped = nn.clip_by_global_norm([Tensor(g) for g in grads], 1.0)
    np.testing.assert_allclose(clipped[0].asnumpy(), [0.6, 0.0])
    np.testing.assert_allclose(clipped[1].asnumpy(), [[0.0, 0.8]])
    unchanged = nn.ClipByGlobalNorm(10.0)([Tensor(g) for g in grads])
    np.testing.assert_allclose(unchanged[0].asnumpy(), grads[0])

    params = [Parameter(np.zeros(2), name="a"), Parameter(np.zeros((1, 2)), name="b")]
    opt = nn.SGD(params, learning_rate=1.0, grad_clip=1.0, loss_scale=2.0)
    opt(tuple(Tensor(g * 2.0) for g in grads))  # clipped after the loss-scale division
    np.testing.assert_allclose(params[0].asnumpy(), [-0.6, 0.0])
    np.testing.assert_allclose(params[1].asnumpy(), [[0.0, -0.8]])
    opt.grad_clip = None  # turned off later (the parallel optimizer clips across shards itself)
    opt(tuple(Tensor(g * 2.0) for g in grads))  # still divided by loss_scale, no longer clipped
    np.testing.assert_allclose(params[0].asnumpy(), [-3.6, 0.0])
    np.testing.assert_allclose(params[1].asnumpy(), [[0.0, -4.8]])


def test_against_torch_when_installed():
    torch = import_torch()
    pairs = [(nn.SGD, dict(learning_rate=0.05, momentum=0.9, weight_decay=0.01),
              lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01)),
             (nn.SGD, dict(learning_rate=0.05, momentum=0.9, nesterov=True),
              lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True)),
             (nn.SGD, dict(learning_rate=0.05, momentum=0.8, dampening=0.3),
              lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, dampening=0.3)),
             (nn.AdamW, dict(learning_rate=0.01, weight_decay=0.1),
              lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
             # MindSpore's Adam adds eps to sqrt(v), torch to the bias-corrected sqrt(v): eps=0 aligns them
             (nn.Adam, dict(learning_rate=0.01, eps=1e-300, weight_decay=0.01),
              lambda p: torch.optim.Adam(p, lr=0.01, eps=0.0, weight_decay=0.01)),
             (nn.Adam, dict(learning_rate=0.01, eps=1e-300, use_amsgrad=True),
              lambda p: torch.optim.Adam(p, lr=0.01, eps=0.0, amsgrad=True))]
    for ours_cls, kwargs, make_torch in pairs:
        params = _params()
        theirs = [torch.tensor(p.asnumpy().copy(), requires_grad=True) for p in params]
        ours, torch_opt = ours_cls(params, **kwargs), make_torch(theirs)
        for grads in _grads(params):
            ours(tuple(Tensor(g) for g in grads))
            for t, g in zip(theirs, grads):
                t.grad = torch.tensor(g)
            torch_opt.step()
        for p, t in zip(params, theirs):
            # the learning rate is a float32 Parameter, as in MindSpore: updates agree to ~1e-7
            np.testing.assert_allclose(p.asnumpy(), t.detach().numpy(), rtol=1e-6, atol=1e-7,
                                       err_msg=f"{ours_cls.__name__} {kwargs}")
