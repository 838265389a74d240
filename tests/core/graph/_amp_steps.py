"""O2 training steps shared by the float16 graph tests: float16 compute, float32 master weights,
momentum and a dynamic loss scale, taken eager or compiled (graph sink)."""
import warnings

import numpy as np

import mstrain as ms
from mstrain import nn
from mstrain.train.sink import GraphSinkRunner


def o2_train_step(net, init_scale, scale_window=2000):
    """`net`'s O2 training step (the Model's train network, in training mode)."""
    manager = ms.DynamicLossScaleManager(init_loss_scale=init_scale, scale_factor=2, scale_window=scale_window)
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Momentum(net.trainable_params(), 0.05, 0.9), amp_level="O2", loss_scale_manager=manager)
    step = model.train_network
    step.set_train(True)
    return step


def parameters(step):
    """Copies of every parameter of the step: weights, optimizer moments, global step."""
    return {p.name: p.asnumpy().copy() for p in step.get_parameters()}


def o2_step(net, x, y, init_scale, sink, prim=None, count=None):
    """One O2 step of `net` on (x, y), eager or graph sink; in sink mode with `prim` given, the
    compiled graph must hold `count` nodes of it. Returns (parameters before, after, loss-scale state)."""
    step = o2_train_step(net, init_scale)
    before = parameters(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if sink:
            runner = GraphSinkRunner(step)
            runner.run([(x, y)])
            if prim is not None:
                assert runner.compiled_calls()[0].graph.count(prim=prim) == count
        else:
            step(ms.Tensor(x), ms.Tensor(y))
    return before, parameters(step), step.scale_sense.get_state()


def assert_update_skipped(before, after, state, scale):
    """An overflowed first step at loss scale `scale`: the scale halved, nothing written."""
    assert state == {"loss_scale": scale / 2, "good_steps": 0, "step": 1}
    for name, value in before.items():  # weights, moments, global step
        np.testing.assert_array_equal(after[name], value, err_msg=name)
