"""A second `Model.train` call in sink mode reuses the compiled step unless something the trace
baked in changed; reused or traced again, it trains exactly as a fresh compile would."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Parameter, Tensor, nn
from mstrain.train.serialization import load_param_into_net

from .nets import as_batches, make_data, make_model


def _weights(net):
    return [p.asnumpy().copy() for p in net.trainable_params()]


def _train_twice(between, fresh_runner, dropout=0.3):
    """Two sink-mode train calls with `between(model, net)` in between; with `fresh_runner` the
    second call gets a newly built runner (the behaviour before runners were kept). Returns the
    number of steps the second call compiled, and the network."""
    x, y = make_data(n=48)
    model, net, _ = make_model(seed=3, dropout=dropout)
    model.train(2, as_batches(x, y), dataset_sink_mode=True)
    between(model, net)
    if fresh_runner:
        model._sink_runner = None
    compiled_before = ms.jit_compile_count()
    model.train(2, as_batches(x, y), dataset_sink_mode=True)
    return ms.jit_compile_count() - compiled_before, net


def test_second_call_reuses_the_compiled_step_and_matches_a_fresh_compile():
    compiled, reused_net = _train_twice(lambda model, net: None, fresh_runner=False)
    _, fresh_net = _train_twice(lambda model, net: None, fresh_runner=True)
    assert compiled == 0
    for a, b in zip(_weights(reused_net), _weights(fresh_net)):
        np.testing.assert_array_equal(a, b)


def _load_other_weights(model, net):
    rng = np.random.default_rng(7)
    load_param_into_net(net, {p.name: Parameter(rng.standard_normal(p.shape).astype(np.float32), name=p.name)
                              for p in net.trainable_params()})


def _reseed(model, net):
    ms.set_seed(11)


def _new_dropout_rate(model, net):
    net.drop.p = 0.6


def _new_parameter_object(model, net):
    # a user swapping the Parameter object: the old one is a resident of the traced step
    rng = np.random.default_rng(5)
    old = net.fc2.bias
    net.fc2.bias = Parameter(Tensor(rng.standard_normal(old.shape).astype(np.float32)), name=old.name)


@pytest.mark.parametrize("between,compiles", [(_load_other_weights, 0), (_reseed, 0),
                                              (_new_dropout_rate, 1), (_new_parameter_object, 1)],
                         ids=["checkpoint", "seed", "dropout_rate", "parameter"])
def test_what_changed_between_calls_is_seen_reused_or_traced_again(between, compiles):
    """Live state (weights, the random stream) is read by the reused step; a changed traced
    constant (a Cell's attribute, a Parameter object) traces the step again."""
    compiled, reused_net = _train_twice(between, fresh_runner=False)
    _, fresh_net = _train_twice(between, fresh_runner=True)
    assert compiled == compiles
    for a, b in zip(_weights(reused_net), _weights(fresh_net)):
        np.testing.assert_array_equal(a, b)
