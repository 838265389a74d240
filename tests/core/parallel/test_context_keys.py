"""Parallel config keys and context settings act: recompute, strategy files, parameter broadcast,
fp32 gradient reduction and the optimizer shard size (multi-rank ones under mpiexec -n 2)."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.parallel import recompute as recompute_module
from mstrain.parallel import reset_auto_parallel_context, set_auto_parallel_context


@pytest.fixture(autouse=True)
def _default_parallel_context():
    reset_auto_parallel_context()
    yield
    reset_auto_parallel_context()


def _batches():
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 3, 8).astype(np.int32))
            for _ in range(3)]


def _train(**context):
    set_auto_parallel_context(**context)
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(6, 16), nn.ReLU(), nn.Dense(16, 3)])
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Adam(net.trainable_params(), learning_rate=0.01))
    model.train(1, _batches())
    return net


def test_context_recompute_runs_every_layer_through_recompute_and_trains_the_same(monkeypatch):
    calls = []
    original = recompute_module.recompute_call
    monkeypatch.setattr(recompute_module, "recompute_call", lambda cell, *a, **k: calls.append(cell) or
                        original(cell, *a, **k))
    plain = _train()
    assert not calls and not any(c.is_recompute for c in plain.cells())
    recomputed = _train(recompute=True)
    assert [c.is_recompute for c in recomputed.cells()] == [True, False, True]  # the Dense layers
    assert len(calls) == 2 * len(_batches())
    for a, b in zip(plain.trainable_params(), recomputed.trainable_params()):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


def test_recompute_layers_takes_the_outermost_cell_lists():
    class Blocks(nn.Cell):
        def __init__(self):
            super().__init__()
            self.embed = nn.Dense(4, 4)
            self.blocks = nn.CellList([nn.SequentialCell([nn.Dense(4, 4), nn.ReLU()]) for _ in range(3)])

        def construct(self, x):
            x = self.embed(x)
            for block in self.blocks:
                x = block(x)
            return x
    net = Blocks()
    marked = recompute_module.recompute_layers(net)
    assert marked == list(net.blocks) and not net.embed.is_recompute
    plain = nn.Dense(3, 3)
    assert recompute_module.recompute_layers(nn.WithLossCell(plain, nn.MSELoss())) == [plain]
