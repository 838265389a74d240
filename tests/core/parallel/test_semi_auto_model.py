"""semi_auto_parallel / auto_parallel through the MindSpore user's path: context + `.shard()` on
ops + `Model(...).train`, no manual wrapping; each rank reads its block of the batch (or the
whole batch with full_batch) and the trained weights equal one process's."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import nn
from mstrain.errors import ParallelConfigError
from mstrain.parallel import DistributedGradReducer, auto_wrap, reset_auto_parallel_context, set_auto_parallel_context
from mstrain.parallel.spmd import SemiAutoParallelCell, batch_layout
from mstrain.parallel.context import data_shard

from ._mpi import load_ranks, run_mpi, run_single

STEPS = 6


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    cache = {}

    def get(net, mode):
        if (net, mode) not in cache:
            path = tmp_path_factory.mktemp(f"single-{net}-{mode}")
            run_single("semi_model.py", path, STEPS, net, mode)
            cache[(net, mode)] = load_ranks(path, 1)[0]
        return cache[(net, mode)]
    return get


@pytest.mark.parametrize("n,net,mode", [(2, "mlp", "semi"), (4, "mlp", "semi"), (2, "mlp", "full"),
                                        (2, "mlp", "auto"), (2, "attn", "semi"), (4, "attn", "semi"),
                                        (2, "attn", "zero")])
def test_model_train_under_semi_auto_matches_one_process(tmp_path, single, n, net, mode):
    want = single(net, mode)
    assert not bool(want["wrapped"])  # one process: nothing to plan
    run_mpi("semi_model.py", n, tmp_path, STEPS, net, mode, timeout=60)
    for r, got in enumerate(load_ranks(tmp_path, n)):
        assert bool(got["wrapped"]), f"rank {r}: Model did not plan the network"
        if mode in ("semi", "zero"):
            assert int(got["gathered"]) > 0  # strategies that disagree with the batch split were followed
        for key in want:
            if key in ("wrapped", "gathered"):
                continue
            np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-5, err_msg=f"rank {r}: {key}")


def test_convolution_and_pooling_follow_the_batch_split(tmp_path, single):
    """No strategy: the conv2d and max_pool2d rules run the forward split by the batch the data is
    read by (no gather of the images), and the trained weights equal one process's."""
    want = single("conv", "semi")
    run_mpi("semi_model.py", 2, tmp_path, STEPS, "conv", "semi", timeout=60)
    for r, got in enumerate(load_ranks(tmp_path, 2)):
        assert bool(got["wrapped"]), f"rank {r}: Model did not plan the network"
        for key in want:
            if key not in ("wrapped", "gathered"):
                np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-5, err_msg=f"rank {r}: {key}")


@pytest.fixture
def fake_world(monkeypatch):
    """Pretend to be rank 0 of 4 for the arithmetic of the planner (no collective is made)."""
    from mstrain import communication
    monkeypatch.setattr(communication, "get_group_size", lambda group=None: 4)
    yield
    reset_auto_parallel_context()


def test_the_batch_layout_gives_each_rank_the_dataset_shard_it_reads(fake_world):
    for mp in (1, 2, 4):
        set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=4, model_parallel=mp)
        for rank in range(4):
            set_auto_parallel_context(global_rank=rank)
            shards, shard_id = data_shard()
            layout = batch_layout((3, 5), tuple(range(4)), 4 // mp)
            assert layout.global_shape == (3 * shards, 5)
            assert layout.block_index(rank) == (shard_id, 0)


def test_pipeline_stages_without_a_pipeline_cell_fail_naming_the_keys(fake_world):
    set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=2)
    net = nn.WithLossCell(nn.Dense(4, 2), nn.MSELoss())
    with pytest.raises(ParallelConfigError, match=r"parallel_mode=semi_auto_parallel with pipeline_stages=2 .*"
                                                  r"Model\(PipelineCell\(net, loss_fn, micro_batch_num\), optimizer=opt\)"):
        ms.build_train_network(net, nn.SGD(net.trainable_params(), 0.1))


def test_the_network_is_wrapped_once_and_only_under_the_planned_modes(fake_world):
    net = nn.WithLossCell(nn.Dense(4, 2), nn.MSELoss())
    assert auto_wrap.plan_train_network(net) is net  # stand-alone
    set_auto_parallel_context(parallel_mode="data_parallel")
    assert auto_wrap.plan_train_network(net) is net
    set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    planned = auto_wrap.plan_train_network(net)
    assert isinstance(planned, SemiAutoParallelCell) and planned.network is net
    assert auto_wrap.plan_train_network(planned) is planned  # already sharded by hand
    set_auto_parallel_context(dataset_strategy=((4, 1), (4, 1)))
    with pytest.raises(ParallelConfigError, match="dataset_strategy"):
        auto_wrap.plan_train_network(net)


@pytest.mark.parametrize("context,degree", [
    (dict(parallel_mode="stand_alone"), 1),
    (dict(parallel_mode="data_parallel", device_num=4), 4),
    (dict(parallel_mode="hybrid_parallel", device_num=2), 2),
    (dict(parallel_mode="semi_auto_parallel", device_num=8, model_parallel=2, pipeline_stages=2), 2),
    (dict(parallel_mode="auto_parallel", device_num=4, model_parallel=4, pipeline_stages=1), 1),
])
def test_data_parallel_degree_decides_the_grad_reducer(context, degree):
    values = {"model_parallel": 1, "pipeline_stages": 1, "device_num": 1, **context}
    assert auto_wrap._data_parallel_degree(values.__getitem__) == degree


def test_stand_alone_plan_is_the_network_and_optimizer_as_given_with_no_reducer():
    net = nn.WithLossCell(nn.Dense(4, 2), nn.MSELoss())
    optimizer = nn.SGD(net.trainable_params(), 0.1)
    assert auto_wrap.plan_train_step(net, optimizer) == (net, optimizer, None)


def test_data_parallel_plan_reduces_the_gradients_unless_the_optimizer_shards(fake_world):
    net = nn.WithLossCell(nn.Dense(4, 2), nn.MSELoss())
    optimizer = nn.SGD(net.trainable_params(), 0.1)
    set_auto_parallel_context(parallel_mode="data_parallel", device_num=4)
    assert isinstance(auto_wrap.make_grad_reducer(optimizer.parameters), DistributedGradReducer)
    set_auto_parallel_context(enable_parallel_optimizer=True)
    assert auto_wrap.make_grad_reducer(optimizer.parameters) is None
