"""The graph pass fusing a training batch norm with the ReLU after it (directly or through a residual
add): the pattern becomes one call, what else reads the batch norm's output keeps it unfused, the
fused graph computes the same numbers, and a ResNet block's loop-sunk training equals eager."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import dataset as ds
from mstrain import nn, ops
from mstrain.graph import Executable, Tracer, tracing
from mstrain.graph.build import compiler_available
from mstrain.graph.conv_fusion import fuse_batch_norm_relu
from mstrain.ops import conv as conv_ops
from mstrain.ops.nn_ops import relu_grad

RNG = np.random.default_rng(0)
X, R = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32), RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
GAMMA, BETA = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
MEAN, VAR = RNG.standard_normal(3).astype(np.float32), (RNG.random(3) + 0.5).astype(np.float32)


STATE = [ms.Parameter(MEAN.copy(), name="moving_mean"), ms.Parameter(VAR.copy(), name="moving_var")]


def _trace(fn):
    tracer = Tracer("g")
    inputs = [tracer.add_input(ms.Tensor(a)) for a in (X, R, GAMMA, BETA)]
    with tracing(tracer):
        out = fn(*inputs, *STATE)
        outs = out if isinstance(out, tuple) else (out,)
        nodes = [tracer.output_node(o) for o in outs]
    return tracer.finish(nodes)


def _bn(x, gamma, beta, mean, var):
    return conv_ops.batch_norm_train(x, gamma, beta, mean, var, eps=1e-3, momentum=0.8)


def _run(graph):
    """The graph's outputs and the moving statistics it moved (from their initial values)."""
    for p, value in zip(STATE, (MEAN, VAR)):
        p.set_data(ms.Tensor(value.copy()))
    outs = Executable(graph).run([X, R, GAMMA, BETA])
    return list(outs) + [p.asnumpy().copy() for p in STATE]


def _calls(graph):
    return sorted(n.prim.name for n in graph.nodes if n.op == "call")


def test_batch_norm_add_relu_becomes_one_call_with_the_same_results():
    graph = _trace(lambda x, r, g, b, m, v: ops.relu(_bn(x, g, b, m, v) + r))
    fused = fuse_batch_norm_relu(graph)
    assert _calls(fused) == ["batch_norm_add_relu_train"] and fused.effects == fused.nodes[-1:]
    for a, b in zip(_run(fused), _run(graph)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_batch_norm_relu_becomes_one_call_and_relu_grad_reads_its_output():
    def f(x, r, g, b, m, v):
        y = _bn(x, g, b, m, v)
        return ops.relu(y), relu_grad(r, y)
    graph = _trace(f)
    fused = fuse_batch_norm_relu(graph)
    assert _calls(fused) == ["batch_norm_relu_train", "relu_grad"]
    (grad,) = [n for n in fused.nodes if n.op == "call" and n.prim.name == "relu_grad"]
    assert grad.inputs[1].prim.name == "batch_norm_relu_train"
    for a, b in zip(_run(fused), _run(graph)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_other_readers_of_the_batch_norm_output_keep_it_unfused():
    cases = [lambda x, r, g, b, m, v: _other_reader(_bn(x, g, b, m, v)),
             lambda x, r, g, b, m, v: _returned(_bn(x, g, b, m, v)),
             # two batch norms moving the same statistics: an update must not move past the other's
             lambda x, r, g, b, m, v: (ops.relu(_bn(x, g, b, m, v)), _bn(r, g, b, m, v) * 2.0),
             lambda x, r, g, b, m, v: ops.relu(_bn(x, g, b, m, v) + g.reshape(1, 3, 1, 1))]  # a broadcast add
    expected = [["batch_norm_train", "exp", "relu"], ["batch_norm_train", "relu"],
                ["batch_norm_train", "batch_norm_train", "mul", "relu"], ["add", "batch_norm_train", "relu", "reshape_to"]]
    for fn, names in zip(cases, expected):
        assert _calls(fuse_batch_norm_relu(_trace(fn))) == names


def _other_reader(y):
    return ops.relu(y), ops.exp(y)


def _returned(y):
    return ops.relu(y), y


# -- a residual block trained in loop sink (fused) and eagerly -----------------------------------------
class _Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.body = nn.SequentialCell([nn.Conv2d(2, 4, 3, stride=2, pad_mode="pad", padding=1, has_bias=False),
                                       nn.BatchNorm2d(4), nn.ReLU(),
                                       nn.Conv2d(4, 4, 3, pad_mode="pad", padding=1, has_bias=False),
                                       nn.BatchNorm2d(4)])
        self.shortcut = nn.SequentialCell([nn.Conv2d(2, 4, 1, stride=2, has_bias=False), nn.BatchNorm2d(4)])
        self.relu = nn.ReLU()
        self.head = nn.Dense(4, 3)

    def construct(self, x):
        return self.head(ops.mean(self.relu(self.body(x) + self.shortcut(x)), (2, 3)))


def _train(sink):
    ms.set_seed(5)
    net = _Block()
    rng = np.random.default_rng(6)
    data = ds.NumpySlicesDataset({"x": rng.standard_normal((24, 2, 8, 8)).astype(np.float32),
                                  "y": rng.integers(0, 3, 24).astype(np.int32)}, shuffle=False).batch(6)
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Momentum(net.trainable_params(), 0.05, 0.9))
    history = model.train(1, data, dataset_sink_mode=sink, sink_size=4 if sink else -1)
    return [history.step_loss] + [p.asnumpy().copy() for _, p in net.parameters_and_names()]


def test_fused_loop_sink_training_equals_eager(tmp_path, monkeypatch):
    monkeypatch.setenv("MSTRAIN_DUMP_IR", str(tmp_path))
    sink = _train(sink=True)
    if not compiler_available():
        pytest.skip("no C++ compiler: the kernel passes (this one among them) do not run")
    (dump,) = tmp_path.glob("*/*_bn_relu.ir")
    text = dump.read_text()
    assert "batch_norm_relu_train!" in text and "batch_norm_add_relu_train!" in text
    assert " relu(" not in text
    eager = _train(sink=False)
    for a, b in zip(sink, eager):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
