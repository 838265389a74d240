"""ops.Depend, Assign, ScatterNdUpdate, Print, L2Normalize and the collectives reached through ops,
against numpy; the in-place ones also inside a compiled step."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import nn, ops



def test_depend_returns_value_and_passes_the_gradient_to_it_only():
    x, y = ms.Tensor(np.array([1.0, 2.0])), ms.Tensor(np.array([3.0]))
    gx, gy = ms.grad(lambda a, b: ops.sum(ops.Depend()(a * 3, b * 2)), grad_position=(0, 1))(x, y)
    np.testing.assert_array_equal(gx.asnumpy(), [3.0, 3.0])
    np.testing.assert_array_equal(gy.asnumpy(), [0.0])


def test_assign_and_scatter_nd_update_write_in_place():
    variable = ms.Parameter(ms.Tensor(np.zeros((3, 2), np.float32)), name="v", requires_grad=False)
    ops.Assign()(variable, ms.Tensor(np.array([1.0, 2.0], np.float32)))
    np.testing.assert_array_equal(variable.asnumpy(), [[1, 2]] * 3)
    ops.ScatterNdUpdate()(variable, np.array([[0], [2]]), ms.Tensor(np.array([[5, 6], [7, 8]], np.float32)))
    np.testing.assert_array_equal(variable.asnumpy(), [[5, 6], [1, 2], [7, 8]])
    ops.ScatterNdUpdate()(variable, np.array([[1, 0]]), ms.Tensor(np.array([9], np.float32)))
    assert variable.asnumpy()[1, 0] == 9
    with pytest.raises(IndexError, match="outside"):
        ops.ScatterNdUpdate()(variable, np.array([[3]]), ms.Tensor(np.zeros((1, 2), np.float32)))


def test_l2_normalize_against_numpy():
    x = np.random.default_rng(0).standard_normal((3, 4))
    out = ops.L2Normalize(axis=1)(ms.Tensor(x)).asnumpy()
    np.testing.assert_allclose(out, x / np.sqrt(np.maximum((x ** 2).sum(1, keepdims=True), 1e-4)), rtol=1e-12)


class _CountingNet(nn.Cell):
    """Counts its calls in a Parameter with Assign and prints it: both effects of a traced step."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(2, 1)
        self.calls = ms.Parameter(ms.Tensor(np.zeros((), np.float32)), name="calls", requires_grad=False)

    def construct(self, x):
        ops.Assign()(self.calls, self.calls + 1)
        ops.Print()("calls:", self.calls)
        return self.dense(x)


def test_assign_and_print_run_on_every_compiled_step(capfd):
    from mstrain import dataset as ds
    ms.set_seed(0)
    net = _CountingNet()
    data = ds.NumpySlicesDataset({"x": np.ones((12, 2), np.float32), "y": np.zeros((12, 1), np.float32)},
                                 shuffle=False).batch(3)
    model = ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1))
    model.train(2, data, dataset_sink_mode=True, sink_size=4)
    assert float(net.calls.asnumpy()) == 8  # 2 sinks x 4 steps (the trace's own run is undone)
    printed = [line for line in capfd.readouterr().out.splitlines() if line.startswith("calls:")]
    assert len(printed) >= 8 and printed[-1].endswith("8.")


def test_collectives_are_reachable_from_ops():
    from mstrain.communication import collectives
    assert ops.AllReduce is collectives.AllReduce and ops.AllGather is collectives.AllGather
    with pytest.raises(AttributeError, match="NoSuchOp"):
        ops.NoSuchOp  # noqa: B018
