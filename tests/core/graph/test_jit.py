"""ms.jit, ms.mutable, GRAPH_MODE, the compile counter and IR dumps."""
import logging
import os
from types import SimpleNamespace

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn, ops
from mstrain.errors import ConfigError
from mstrain.jit import cell_compile_count, jit


def _t(*shape, dtype=np.float32, seed=0):
    return ms.Tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def test_one_compilation_per_signature():
    f = jit(lambda x, y: ops.exp(x) * y)
    a, b = _t(2, 3), _t(2, 3, seed=1)
    for _ in range(3):
        np.testing.assert_allclose(f(a, b).asnumpy(), np.exp(a.asnumpy()) * b.asnumpy(), rtol=1e-6)
    assert f.compile_count == 1
    f(_t(4, 3), _t(4, 3))        # new shape
    f(_t(2, 3, dtype=np.float64), _t(2, 3, dtype=np.float64))  # new dtype
    assert f.compile_count == 3


def test_compilations_are_counted_and_logged(caplog):
    before = ms.jit_compile_count()
    f = jit(lambda x: x + 1)
    with caplog.at_level(logging.INFO, logger="mstrain.graph"):
        f(_t(3))
        f(_t(3))
    assert ms.jit_compile_count() == before + 1
    assert sum("jit: compiled" in r.getMessage() for r in caplog.records) == 1


def test_python_scalars_are_constants_and_mutable_ones_are_inputs():
    f = jit(lambda x, s: x * s)
    x = _t(3)
    f(x, 2.0)
    f(x, 3.0)
    assert f.compile_count == 2  # a plain scalar is part of the signature
    g = jit(lambda x, s: x * s)
    for s in (2.0, 3.0, -1.5):
        out = g(x, ms.mutable(s))
        np.testing.assert_allclose(out.asnumpy(), x.asnumpy() * s, rtol=1e-6)
    assert g.compile_count == 1


def test_mutable_tuple_of_scalars_does_not_recompile():
    f = jit(lambda x, coeffs: x * coeffs[0] + coeffs[1])
    x = _t(4)
    for c in ((1.0, 2.0), (3.0, -1.0), (0.5, 0.25)):
        np.testing.assert_allclose(f(x, ms.mutable(c)).asnumpy(), x.asnumpy() * c[0] + c[1], rtol=1e-6)
    assert f.compile_count == 1


def test_nested_structures_kwargs_and_returned_inputs():
    @jit
    def f(pair, scale=1.0):
        a, b = pair
        return {"sum": (a + b) * scale, "a": a}
    a, b = _t(2), _t(2, seed=3)
    out = f((a, b), scale=2.0)
    out = f((a, b), scale=2.0)
    np.testing.assert_allclose(out["sum"].asnumpy(), (a.asnumpy() + b.asnumpy()) * 2.0, rtol=1e-6)
    assert out["a"] is a
    assert f.compile_count == 1


def test_jit_on_a_method_and_parameters_read_by_reference():
    class Scale(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(np.full(3, 2.0, np.float32), name="w")

        @jit
        def construct(self, x):
            return x * self.w
    cell = Scale()
    x = _t(3)
    cell(x)
    cell.w.set_data(np.full(3, 5.0, np.float32))  # new array: the graph re-binds, no retrace
    np.testing.assert_allclose(cell(x).asnumpy(), x.asnumpy() * 5.0, rtol=1e-6)
    assert Scale.construct.compile_count == 1


def test_graph_mode_runs_cells_compiled():
    net = nn.Dense(4, 3)
    x = _t(2, 4)
    expected = net(x).asnumpy()
    ms.set_context(mode=ms.GRAPH_MODE)
    assert ms.get_context("mode") == ms.GRAPH_MODE
    for _ in range(3):
        np.testing.assert_allclose(net(x).asnumpy(), expected, rtol=1e-5, atol=1e-6)
    assert cell_compile_count(net) == 1
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net(x)
    assert cell_compile_count(net) == 1


def test_graph_mode_train_and_eval_compile_separately():
    ms.set_seed(1)
    net = nn.SequentialCell([nn.Dense(4, 4), nn.Dropout(p=0.5)])
    x = _t(2, 4)
    ms.set_context(mode=ms.GRAPH_MODE)
    net.set_train(False)
    eval_out = net(x).asnumpy()
    net.set_train(True)
    net(x)
    net.set_train(False)
    np.testing.assert_array_equal(net(x).asnumpy(), eval_out)
    assert cell_compile_count(net) == 2


def test_set_context_rejects_unknown_keys_and_values():
    with pytest.raises(ConfigError, match="unknown context key 'modee'"):
        ms.set_context(modee=0)
    with pytest.raises(ConfigError, match="mode must be one of"):
        ms.set_context(mode=7)


def test_dump_ir_writes_each_graph_before_and_after_every_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("MSTRAIN_DUMP_IR", str(tmp_path))
    jit(lambda x: ops.exp(x) * 1.0 + 0.0)(_t(3))
    (folder,) = [p for p in tmp_path.iterdir()]
    names = sorted(os.listdir(folder))
    assert names[0] == "00_traced.ir" and names[1] == "01_dce.ir" and "04_cse.ir" in names
    traced = (folder / "00_traced.ir").read_text()
    simplified = (folder / "03_simplify.ir").read_text()
    assert "mul(" in traced and "mul(" not in simplified


def test_jit_inside_grad_runs_inline():
    f = jit(lambda x: ops.sum(x * x))
    g = ms.grad(f)(_t(3))
    np.testing.assert_allclose(g.asnumpy(), 2 * _t(3).asnumpy(), rtol=1e-6)
    assert f.compile_count == 0


def test_input_signature_checks_calls():
    any_rows = SimpleNamespace(shape=(None, 3), dtype=ms.float32)  # anything with shape and dtype
    f = jit(lambda x, y: x + y, input_signature=(any_rows, ms.Tensor(shape=(3,), dtype=ms.float32)))
    out = f(_t(2, 3), _t(3))
    np.testing.assert_allclose(out.asnumpy(), _t(2, 3).asnumpy() + _t(3).asnumpy(), rtol=1e-6)
    f(_t(5, 3), _t(3))
    with pytest.raises(TypeError, match=r"input 1 is float32\[4\], the input_signature declares float32\[3\]"):
        f(_t(2, 3), _t(4))
    with pytest.raises(TypeError, match="input 0 is float64"):
        f(_t(2, 3, dtype=np.float64), _t(3))


def test_graph_mode_trains_with_a_loss_scale_manager():
    """The loss-scaled step skips overflowed updates branch-free: GRAPH_MODE compiles it (same
    weights as PYNATIVE_MODE); a host-side update cell still runs eagerly instead of failing."""
    from mstrain.jit import cell_compile_count
    from mstrain.train.loss_scale import FixedLossScaleManager

    class HostCell:
        """An update cell with only the host interface (`loss_scale`, `update`)."""
        loss_scale, drop_overflow_update = 128.0, True

        def update(self, overflow):
            self.overflow = overflow

    def train(mode, update_cell, compiled):
        ms.set_seed(0)
        net = nn.Dense(4, 3)
        step = nn.TrainOneStepWithLossScaleCell(
            nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1), scale_sense=update_cell)
        ms.set_context(mode=mode)
        try:
            for seed in range(3):
                step(_t(2, 4, seed=seed), _t(2, 3, seed=seed + 10))
        finally:
            ms.set_context(mode=ms.PYNATIVE_MODE)
        assert cell_compile_count(step) == compiled
        return net.weight.asnumpy()
    expected = train(ms.PYNATIVE_MODE, FixedLossScaleManager(128.0).get_update_cell(), 0)
    np.testing.assert_array_equal(train(ms.GRAPH_MODE, FixedLossScaleManager(128.0).get_update_cell(), 1),
                                  expected)
    np.testing.assert_array_equal(train(ms.GRAPH_MODE, HostCell(), 0), expected)
