"""Cell.shard (MindSpore 2.x cell-level strategy): under auto_parallel + sharding_propagation on 2
ranks a sub-cell's in/out strategies and parameter plan give the single-process weights; bad
strategies get one error naming the cell."""
import numpy as np
import pytest

from mstrain import Tensor, nn
from mstrain.errors import ParallelConfigError
from mstrain.parallel import SemiAutoParallelCell

from ._mpi import load_ranks, run_mpi, run_single

VARIANTS = ("rows", "cols", "out", "plan")


def test_cell_strategies_train_like_one_process(tmp_path):
    run_single("cell_shard.py", tmp_path / "one", 3, "rows")
    single = {k.split("/", 1)[1]: v for k, v in load_ranks(tmp_path / "one", 1)[0].items() if "gathered" not in k}
    run_mpi("cell_shard.py", 2, tmp_path / "two", 3, ",".join(VARIANTS))
    for r, got in enumerate(load_ranks(tmp_path / "two", 2)):
        for variant in VARIANTS:
            for key in single:
                np.testing.assert_allclose(got[f"{variant}/{key}"], single[key], rtol=0, atol=1e-5,
                                           err_msg=f"rank {r}, {variant}: {key}")
        # cutting the features (not the batch) makes the products partial sums: more is moved
        assert int(got["cols/gathered"]) > int(got["rows/gathered"]) > 0


class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(4, 2)

    def construct(self, x):
        return self.dense(x)


@pytest.mark.parametrize("strategy,shape,message", [
    (((2,),), (4, 4), "strategy \\(2,\\) has 1 entries for a tensor of rank 2"),
    (((3, 1),), (4, 4), "strategy \\(3, 1\\) splits axis 0 of size 4 3 ways"),
    (((2, 1),), (4, 4), "strategy \\(2, 1\\) uses 2 devices, more than or not dividing the 1 ranks"),
])
def test_bad_strategy_names_the_cell(strategy, shape, message):
    net = SemiAutoParallelCell(Block().shard(in_strategy=strategy))
    with pytest.raises(ParallelConfigError, match="Block.shard in_strategy\\[0\\]: " + message):
        net(Tensor(np.ones(shape, np.float32)))


def test_malformed_strategies_and_plans_are_refused():
    with pytest.raises(ParallelConfigError, match="Block.shard: in_strategy must be a tuple"):
        Block().shard(in_strategy=(2, 1))
    with pytest.raises(ParallelConfigError, match="Block.shard: parameter_plan must map"):
        Block().shard(in_strategy=((1, 1),), parameter_plan={"dense.weight": (0, 1)})
    net = SemiAutoParallelCell(Block().shard(in_strategy=((1, 1),), parameter_plan={"self.dense.bogus": (1, 1)}))
    with pytest.raises(ParallelConfigError, match="'self.dense.bogus', which is not a parameter of the cell"):
        net(Tensor(np.ones((4, 4), np.float32)))


def test_strategy_changes_nothing_outside_a_sharded_forward():
    block = Block()
    x = Tensor(np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32))
    before = block(x).asnumpy()
    np.testing.assert_array_equal(block.shard(in_strategy=((2, 1),))(x).asnumpy(), before)
