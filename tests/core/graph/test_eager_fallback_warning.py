"""GRAPH_MODE never runs a Cell eagerly without saying so: one warning naming the Cell that cannot
be traced and why, then eager calls with the eager numbers."""
import warnings

import numpy as np

import mstrain as ms
from mstrain import nn
from mstrain.jit import cell_compile_count


class HostDecision(nn.Cell):
    _graph_mode_eager = "it reads the sign of its input on the host"

    def construct(self, x):
        return x * 2.0 if float(x.asnumpy().sum()) > 0 else x


class Outer(nn.Cell):
    def __init__(self):
        super().__init__()
        self.inner = HostDecision()

    def construct(self, x):
        return self.inner(x) + 1.0


def test_graph_mode_warns_once_naming_the_cell_and_the_reason():
    ms.set_context(mode=ms.GRAPH_MODE)
    net = Outer()
    x = ms.Tensor(np.ones(3, np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [net(x).asnumpy() for _ in range(3)]
    messages = [str(w.message) for w in caught if "GRAPH_MODE" in str(w.message)]
    assert len(messages) == 1
    assert "Outer runs eagerly" in messages[0] and "HostDecision" in messages[0]
    assert "reads the sign of its input on the host" in messages[0]
    assert cell_compile_count(net) == 0
    for out in outs:
        np.testing.assert_array_equal(out, np.full(3, 3.0, np.float32))


def test_a_traceable_cell_compiles_without_a_warning():
    ms.set_context(mode=ms.GRAPH_MODE)
    net = nn.Dense(3, 2)
    x = ms.Tensor(np.ones((4, 3), np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net(x)
        net(x)
    assert not [w for w in caught if "eagerly" in str(w.message)]
    assert cell_compile_count(net) == 1
