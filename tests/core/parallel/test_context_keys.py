"""Parallel config keys and context settings act: recompute, strategy files, parameter broadcast,
fp32 gradient reduction and the optimizer shard size (multi-rank ones under mpiexec -n 2)."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.nn.cell import PARALLEL_CALLS
from mstrain.parallel.auto_wrap import recompute_layers
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
    original = PARALLEL_CALLS.recompute
    monkeypatch.setattr(PARALLEL_CALLS, "recompute", staticmethod(lambda cell, *a, **k: calls.append(cell) or
                                                                  original(cell, *a, **k)))
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
    marked = recompute_layers(net)
    assert marked == list(net.blocks) and not net.embed.is_recompute
    plain = nn.Dense(3, 3)
    assert recompute_layers(nn.WithLossCell(plain, nn.MSELoss())) == [plain]


def test_parameter_broadcast_and_fp32_gradient_sync_on_two_ranks(tmp_path):
    from ._mpi import load_ranks, run_mpi
    run_mpi("context_keys.py", 2, tmp_path, "broadcast_fp32", timeout=120)
    first, second = load_ranks(tmp_path, 2)
    # ranks initialised differently stay different without parameter_broadcast ...
    assert np.abs(first["init_False"] - second["init_False"]).max() > 0.1
    assert np.abs(first["trained_False"] - second["trained_False"]).max() > 0.1
    # ... and start (hence train) identically from rank 0's values with it
    np.testing.assert_array_equal(first["init_True"], second["init_True"])
    np.testing.assert_array_equal(first["trained_True"], second["trained_True"])
    np.testing.assert_array_equal(first["init_True"], first["init_False"])  # rank 0's own initialisation
    exact = first["sent"].astype(np.float64) + second["sent"]
    for rank in (first, second):
        np.testing.assert_allclose(rank["reduced_True"], exact, rtol=1e-6, atol=1e-12)  # fp32 all-reduce
        # gradient_fp32_sync=False: sent as float16 (half the bytes), handed back as float32
        assert str(rank["dtype_False"]) == "float32" and int(rank["bytes_False"]) * 2 == int(rank["bytes_True"])
        err = np.abs(rank["reduced_False"] - exact)
        # each addend and the sum rounded to float16 (relative 2^-11, subnormal spacing 2^-24)
        bound = 2.0 ** -11 * (np.abs(first["sent"]) + np.abs(second["sent"]) + np.abs(exact)) + 3 * 2.0 ** -24
        assert err.max() > 0 and np.all(err <= bound)


def test_optimizer_weight_shard_size_limits_the_zero_group_on_four_ranks(tmp_path):
    from ._mpi import load_ranks, run_mpi
    run_mpi("context_keys.py", 4, tmp_path, "shard_size", timeout=150)
    for rank in load_ranks(tmp_path, 4):
        assert int(rank["group_-1"]) == 4 and float(rank["ratio_-1"]) == pytest.approx(0.25, abs=0.02)
        assert int(rank["group_2"]) == 2 and float(rank["ratio_2"]) == pytest.approx(0.5, abs=0.02)
        np.testing.assert_allclose(rank["weights_2"], rank["weights_-1"], rtol=0, atol=1e-6)


def test_optimizer_weight_shard_size_is_checked():
    from mstrain.errors import ParallelConfigError
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ParallelConfigError, match="optimizer_weight_shard_size"):
            set_auto_parallel_context(optimizer_weight_shard_size=bad)


def test_strategy_file_is_written_and_loaded_by_a_stand_alone_run(tmp_path):
    import json
    from mstrain.errors import ParallelConfigError
    path = tmp_path / "strategy.json"
    saved = _train(strategy_ckpt_save_file=str(path))
    doc = json.loads(path.read_text())
    assert doc["format"] == "mstrain-strategy" and doc["world_size"] == 1
    entries = doc["ranks"]["0"]
    assert {p.name for p in saved.trainable_params()} | {"moment1.0.weight", "moment2.2.bias"} <= set(entries)
    assert entries["0.weight"]["global_shape"] == [16, 6] and entries["0.weight"]["layout"] is None
    reset_auto_parallel_context()
    loaded = _train(strategy_ckpt_load_file=str(path))  # the same layouts: trains as before
    for a, b in zip(saved.trainable_params(), loaded.trainable_params()):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())

    doc["world_size"] = 2
    path.write_text(json.dumps(doc))
    reset_auto_parallel_context()
    with pytest.raises(ParallelConfigError, match="written by 2 ranks"):
        _train(strategy_ckpt_load_file=str(path))
    doc["world_size"] = 1
    doc["ranks"]["0"]["9.weight"] = dict(entries["0.weight"], layout={
        "dev_matrix": [1], "tensor_map": [0, -1], "global_shape": [16, 6], "ranks": [0]})
    path.write_text(json.dumps(doc))
    reset_auto_parallel_context()
    with pytest.raises(ParallelConfigError, match="'9.weight'"):
        _train(strategy_ckpt_load_file=str(path))


def test_strategy_file_written_by_one_run_lays_out_the_next_on_two_ranks(tmp_path):
    from ._mpi import load_ranks, run_mpi
    strategy = tmp_path / "strategy.json"
    run_mpi("strategy_file.py", 2, tmp_path / "save", "save", strategy, timeout=120)
    assert strategy.exists()
    run_mpi("strategy_file.py", 2, tmp_path / "load", "load", strategy, timeout=120)
    for saved, loaded in zip(load_ranks(tmp_path / "save", 2), load_ranks(tmp_path / "load", 2)):
        assert saved["w0"].shape == (16, 16)  # cut by columns over the two ranks
        for key in saved:
            if key.startswith("layout_"):
                assert str(loaded[key]) == str(saved[key]) != "null", key
            else:
                np.testing.assert_array_equal(loaded[key], saved[key], err_msg=key)
