"""Cell: registration, stable dotted names and order, caches, modes, to_float, containers."""
from collections import OrderedDict

import numpy as np
import pytest

import mstrain as ms
from mstrain import Parameter, ParameterTuple, Tensor, nn


class MLP(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(4, 8)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(p=0.5)
        self.fc2 = nn.Dense(8, 3)

    def construct(self, x):
        return self.fc2(self.drop(self.act(self.fc1(x))))


class Outer(nn.Cell):
    def __init__(self):
        super().__init__()
        self.scale = Parameter(np.ones(3, np.float32))
        self.body = MLP()
        self.heads = nn.CellList([nn.Dense(3, 2), nn.Dense(3, 2)])

    def construct(self, x):
        h = self.body(x) * self.scale
        return self.heads[0](h) + self.heads[1](h)


def test_parameter_names_are_dotted_paths_in_registration_order():
    names = [p.name for p in Outer().trainable_params()]
    assert names == ["scale", "body.fc1.weight", "body.fc1.bias", "body.fc2.weight", "body.fc2.bias",
                     "heads.0.weight", "heads.0.bias", "heads.1.weight", "heads.1.bias"]
    pairs = list(Outer().parameters_and_names())
    assert [n for n, _ in pairs] == names
    assert all(n == p.name for n, p in pairs)


def test_wrappers_do_not_rename_and_structural_names_include_the_path():
    net = MLP()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    assert [p.name for p in net.trainable_params()] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    structural = dict(train.parameters_and_names())
    assert structural["network._backbone.fc1.weight"] is net.fc1.weight
    assert list(train.parameters_dict())[:4] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def test_explicit_names_kept_until_prefixed_and_update_parameters_name():
    cell = nn.Cell()
    cell.w = Parameter(np.zeros(2, np.float32), name="my_w")
    assert cell.w.name == "my_w"
    cell.insert_param_to_cell("v", Parameter(np.zeros(1, np.float32)))
    assert cell.v.name == "v"
    with pytest.raises(KeyError, match="must not contain"):
        cell.insert_param_to_cell("a.b", Parameter(np.zeros(1, np.float32)))
    cell.update_parameters_name("net.")
    assert [p.name for p in cell.get_parameters()] == ["net.w", "net.v"]


def test_shared_parameter_listed_once():
    net = nn.Cell()
    net.a = nn.Dense(2, 2)
    net.b = nn.Dense(2, 2)
    net.b.weight = net.a.weight
    params = net.trainable_params()
    assert [p.name for p in params] == ["a.weight", "a.bias", "b.bias"]
    assert params[0] is net.b.weight


def test_cache_invalidated_by_changes_anywhere_in_the_tree():
    outer = Outer()
    before = len(outer.trainable_params())
    outer.body.extra = nn.Dense(2, 2)  # a change two levels down
    assert len(outer.trainable_params()) == before + 2
    del outer.body.extra
    assert len(outer.trainable_params()) == before
    outer.body.fc2 = None  # replacing a registered cell by a plain value unregisters it
    assert len(outer.trainable_params()) == before - 2


def test_requires_grad_filters_trainable_params():
    net = MLP()
    net.fc1.bias.requires_grad = False
    assert [p.name for p in net.trainable_params()] == ["fc1.weight", "fc2.weight", "fc2.bias"]
    assert [p.name for p in net.untrainable_params()] == ["fc1.bias"]


def test_assigning_before_init_is_a_clear_error():
    class Broken(nn.Cell):
        def __init__(self):
            self.fc = nn.Dense(1, 1)
            super().__init__()

    with pytest.raises(AttributeError, match=r"super\(\)\.__init__\(\)"):
        Broken()


def test_set_train_reaches_every_descendant():
    outer = Outer()
    assert not outer.body.drop.training
    outer.set_train()
    assert all(cell.training for _, cell in outer.cells_and_names())
    outer.set_train(False)
    assert not any(cell.training for _, cell in outer.cells_and_names())


def test_cells_and_names_and_name_cells():
    outer = Outer()
    names = [n for n, _ in outer.cells_and_names()]
    assert names[:4] == ["", "body", "body.fc1", "body.act"]
    assert "heads.1" in names
    assert list(outer.name_cells()) == ["body", "heads"]


def test_replacing_a_child_keeps_its_place_in_the_order():
    mlp = MLP()
    mlp.fc1 = nn.Dense(4, 8)
    mlp.insert_child_to_cell("act", nn.GELU())
    assert list(mlp.name_cells()) == ["fc1", "act", "drop", "fc2"]
    assert [p.name for p in mlp.trainable_params()] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    del mlp.act
    mlp.act = nn.ReLU()  # a removed child comes back at the end
    assert list(mlp.name_cells()) == ["fc1", "drop", "fc2", "act"]


def test_to_float_computes_in_fp16_and_keeps_fp32_master_weights():
    ms.set_seed(0)
    net = MLP()
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    ref = net(Tensor(x)).asnumpy()
    net.to_float(ms.float16)
    assert net.compute_dtype == ms.float16 and net.fc1.compute_dtype == ms.float16
    out = net(Tensor(x))
    assert out.dtype == ms.float16
    np.testing.assert_allclose(out.asnumpy().astype(np.float32), ref, rtol=2e-2, atol=2e-2)
    assert all(p.dtype == ms.float32 for p in net.trainable_params())
    loss_fn = lambda t: ms.ops.sum(ms.ops.cast(net(t), ms.float32))  # noqa: E731
    grads = ms.grad(loss_fn, None, net.trainable_params())(Tensor(x))
    assert all(g.dtype == ms.float32 and g.shape == p.shape for g, p in zip(grads, net.trainable_params()))
    assert np.abs(grads[0].asnumpy()).sum() > 0


def test_pipeline_stage_and_recompute_flags():
    outer = Outer()
    assert outer.pipeline_stage == 0
    outer.body.pipeline_stage = 1
    assert outer.body.pipeline_stage == 1
    with pytest.raises(ValueError, match="pipeline_stage"):
        outer.body.pipeline_stage = -1
    outer.body.recompute()
    assert outer.body.is_recompute and not outer.is_recompute


def test_recomputed_cell_gives_the_same_gradients():
    ms.set_seed(4)
    net = MLP()
    net.drop.p = 0.0
    x = Tensor(np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32))
    loss = lambda t: ms.ops.sum(net(t) ** 2)  # noqa: E731
    plain = ms.grad(loss, None, net.trainable_params())(x)
    net.fc1.recompute()
    again = ms.grad(loss, None, net.trainable_params())(x)
    for a, b in zip(plain, again):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-6)


def test_graph_mode_runs_cells_through_the_context_runner(monkeypatch):
    from mstrain import context
    calls = []
    monkeypatch.setattr(context.STATE, "cell_runner", lambda cell, args, kwargs: calls.append(cell) or "ran")
    net = MLP()
    assert net(Tensor(np.ones((1, 4), np.float32))) == "ran" and calls == [net]


def test_repr_shows_the_tree():
    text = repr(Outer())
    assert "(body): MLP<" in text and "(fc1): Dense<input_channels=4, output_channels=8, has_bias=True>" in text
    assert "(heads): CellList<" in text


def test_parameter_tuple_attribute_registers_members():
    cell = nn.Cell()
    cell.state = ParameterTuple([Parameter(np.zeros(2, np.float32), name="s.a")])
    assert [p.name for p in cell.get_parameters()] == ["s.a"]
    clones = cell.state.clone("m", init="ones")
    assert clones[0].name == "m.s.a" and not clones[0].requires_grad
    np.testing.assert_array_equal(clones[0].asnumpy(), 1)
    with pytest.raises(TypeError, match="not a Parameter"):
        ParameterTuple([np.zeros(1)])


def test_cell_list_operations_rename_parameters():
    layers = nn.CellList()
    layers.append(nn.Dense(2, 2))
    layers.extend([nn.Dense(2, 3), nn.Dense(3, 1)])
    assert len(layers) == 3 and isinstance(layers[-1], nn.Dense)
    del layers[0]
    assert [p.name for p in layers.trainable_params()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert layers[0].out_channels == 3
    layers.insert(0, nn.Dense(5, 2))
    assert [c.in_channels for c in layers] == [5, 2, 3]
    assert isinstance(layers[1:], nn.CellList) and len(layers[1:]) == 2
    with pytest.raises(TypeError, match="expected a Cell"):
        layers.append("relu")


def test_sequential_cell_from_ordered_dict_and_indexing():
    seq = nn.SequentialCell(OrderedDict([("fc", nn.Dense(2, 3)), ("act", nn.ReLU())]))
    assert [p.name for p in seq.trainable_params()] == ["fc.weight", "fc.bias"]
    assert isinstance(seq[1], nn.ReLU) and len(seq) == 2
    positional = nn.SequentialCell(nn.Dense(2, 2), nn.ReLU())
    assert len(positional) == 2 and positional(Tensor(np.ones((1, 2), np.float32))).shape == (1, 2)


def test_cell_dict():
    heads = nn.CellDict({"a": nn.Dense(2, 1)})
    heads["b"] = nn.Dense(2, 2)
    assert list(heads.keys()) == ["a", "b"] and "b" in heads and len(heads) == 2
    assert [p.name for p in heads.trainable_params()] == ["a.weight", "a.bias", "b.weight", "b.bias"]
    heads.pop("a")
    assert [p.name for p in heads.trainable_params()] == ["b.weight", "b.bias"]
    with pytest.raises(KeyError, match="without '.'"):
        heads["x.y"] = nn.ReLU()


def test_cast_param_follows_to_float_and_asnumpy_shares_memory():
    dense = nn.Dense(3, 2)
    weight = dense.weight
    assert dense.cast_param(weight) is weight and dense.cast_param(None) is None  # no to_float: as is
    dense.to_float(ms.float16)
    cast = dense.cast_param(weight)
    assert cast.dtype == ms.float16 and weight.dtype == ms.float32
    np.testing.assert_array_equal(cast.asnumpy(), weight.asnumpy().astype(np.float16))
    steps = ms.Parameter(ms.Tensor(np.array([1, 2], np.int32)), name="steps")
    assert dense.cast_param(steps) is steps  # only floating Parameters are cast
    view = weight.asnumpy()
    view[0, 0] = 7.0  # asnumpy is the Tensor's own storage, no copy
    assert float(weight.asnumpy()[0, 0]) == 7.0
