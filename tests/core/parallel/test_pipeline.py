"""1F1B pipeline stages (with data parallel, gradient accumulation and recompute, and with
semi-auto `.shard()` strategies inside the stages) vs one process."""
import numpy as np
import pytest

from ._mpi import load_ranks, run_mpi, run_single


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    path = tmp_path_factory.mktemp("pp1")
    run_single("pipeline_train.py", path, 10, 1, 1)
    return load_ranks(path, 1)[0]


def _check(got_ranks, want):
    names = set()
    for r, got in enumerate(got_ranks):
        for key in got:
            np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-5, err_msg=f"rank {r}: {key}")
            names.add(key)
    assert names == set(want)  # every parameter lives on some stage


def test_gradient_accumulation_over_micro_batches(tmp_path, single):
    run_single("pipeline_train.py", tmp_path, 10, 1, 4)
    _check(load_ranks(tmp_path, 1), single)


@pytest.mark.parametrize("n,stages,micro,extra", [(2, 2, 4, ""), (4, 2, 2, ""), (4, 4, 4, "recompute")])
def test_pipeline_matches_one_process(tmp_path, single, n, stages, micro, extra):
    run_mpi("pipeline_train.py", n, tmp_path, 10, stages, micro, *([extra] if extra else []))
    got = load_ranks(tmp_path, n)
    _check(got, single)
    per_rank = [set(g) - {"losses"} for g in got]
    assert all(len(p) < len(set(single) - {"losses"}) for p in per_rank)  # each rank holds only its stage


@pytest.mark.parametrize("n,stages,micro", [(4, 2, 2), (2, 1, 2)])
def test_semi_auto_strategies_inside_pipeline_stages(tmp_path_factory, n, stages, micro):
    """Batch/column/row MatMul strategies over each stage's ranks, Adam, 1F1B: one process's numbers."""
    single_dir, multi_dir = tmp_path_factory.mktemp("sp1"), tmp_path_factory.mktemp("spn")
    run_single("semi_pipeline.py", single_dir, 6, 1, 1)
    run_mpi("semi_pipeline.py", n, multi_dir, 6, stages, micro, timeout=60)
    want = load_ranks(single_dir, 1)[0]
    assert not bool(want.pop("sharded_stage"))
    for r, got in enumerate(load_ranks(multi_dir, n)):
        assert bool(got.pop("sharded_stage")), f"rank {r}: the stage did not run its strategies"
        for key in got:
            np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-5, err_msg=f"rank {r}: {key}")


def test_recompute_gives_the_same_gradients_with_dropout():
    import mstrain as ms
    from mstrain.nn.container import SequentialCell
    from mstrain.nn.layers import Dense, Dropout
    from mstrain.ops import functional as F

    ms.set_seed(0)
    block = SequentialCell([Dense(4, 8, activation="tanh"), Dropout(p=0.3), Dense(8, 4)]).set_train(True)
    params = block.trainable_params()
    x = ms.Tensor(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
    grad_fn = ms.value_and_grad(lambda t: F.sum(block(t) ** 2), 0, params)
    ms.set_seed(1)
    loss1, (gx1, gw1) = grad_fn(x)
    block.recompute()
    ms.set_seed(1)
    loss2, (gx2, gw2) = grad_fn(x)
    assert float(loss1.asnumpy()) == float(loss2.asnumpy())
    np.testing.assert_array_equal(gx1.asnumpy(), gx2.asnumpy())
    for a, b in zip(gw1, gw2):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


def test_model_trains_a_pipeline_cell_with_the_1f1b_step():
    """Model(PipelineCell(net, loss, M), optimizer=opt), as in MindSpore, trains with the
    pipeline's own step: on one process it is gradient accumulation, equal to the plain step."""
    import mstrain as ms
    from mstrain import Model, dataset as ds, nn
    from mstrain.parallel import PipelineCell

    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal((32, 6)).astype(np.float32), "y": rng.integers(0, 3, 32).astype(np.int32)}

    def train(pipelined):
        ms.set_seed(0)
        net = nn.SequentialCell([nn.Dense(6, 8), nn.ReLU(), nn.Dense(8, 3)])
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        if pipelined:
            model = Model(PipelineCell(net, loss, 4), optimizer=nn.SGD(net.trainable_params(), 0.1))
        else:
            model = Model(net, loss, nn.SGD(net.trainable_params(), 0.1))
        model.train(2, ds.NumpySlicesDataset(data, shuffle=False).batch(8))
        return [p.asnumpy() for p in net.trainable_params()]
    for got, want in zip(train(True), train(False)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
