"""Collectives and their gradients against numpy, on 1, 2 and 4 ranks; groups; region pairs."""
import numpy as np
import pytest

from mstrain import communication as comm
from mstrain.communication import ParallelGroups
from mstrain.errors import ParallelConfigError

from ._mpi import load_ranks, run_mpi, run_single


def _inputs(n):
    base = np.arange(4 * n * 3, dtype=np.float32).reshape(4 * n, 3)
    w = np.linspace(-1, 1, base.size * n, dtype=np.float32).reshape(4 * n * n, 3)
    return [base * (r + 1) for r in range(n)], w


def _expected(n, r):
    xs, w = _inputs(n)
    total = sum(xs)
    blk = slice(r * 4, (r + 1) * 4)
    w4, wn, wnn = w[:4], w[:4 * n], w[:4 * n * n]
    wr = wn.reshape(4, 3 * n)
    return {
        "all_reduce": total, "all_reduce_max": xs[-1], "all_gather": np.concatenate(xs),
        "all_gather_axis1": np.concatenate(xs, axis=1), "reduce_scatter": total[blk],
        "all_to_all": np.concatenate([x[blk] for x in xs], axis=1), "broadcast": xs[-1],
        "grad_all_reduce": n * wn, "grad_all_gather": n * wnn[r * 4 * n:(r + 1) * 4 * n],
        "grad_reduce_scatter": np.tile(w4, (n, 1)), "grad_all_to_all": np.tile(wr[:, 3 * r:3 * r + 3], (n, 1)),
        "grad_broadcast": n * wn if r == 0 else np.zeros_like(wn),
        "copy_to_region_grad": np.full_like(xs[0], n * (n + 1) / 2), "reduce_from_region_grad": wn,
        "scatter_to_region": xs[r][blk], "scatter_to_region_grad": np.tile(w4, (n, 1)),
        "gather_from_region_grad": wnn[r * 4 * n:(r + 1) * 4 * n],
        "iall_reduce": total, "iall_gather": np.concatenate(xs), "ireduce_scatter": total[blk],
    }


@pytest.mark.parametrize("n", [1, 2, 4])
def test_collectives_and_gradients_match_numpy(tmp_path, n):
    if n == 1:
        run_single("collectives.py", tmp_path)
    else:
        run_mpi("collectives.py", n, tmp_path)
    for r, got in enumerate(load_ranks(tmp_path, n)):
        for key, want in _expected(n, r).items():
            np.testing.assert_allclose(got[key], want, rtol=1e-6, atol=1e-6, err_msg=f"rank {r}: {key}")
        if n >= 2 and r == 0:
            np.testing.assert_allclose(got["grad_send"], 2 * _inputs(n)[1][:4 * n], rtol=1e-6)
        if n >= 2 and r == 1:
            assert float(got["grad_receive_token"]) == 1.0
        assert int(got["evens_size"]) == len(range(0, n, 2))
        assert int(got["evens_rank"]) == (r // 2 if r % 2 == 0 else -1)
        assert int(got["world_from_group"]) == 2 * (len(range(0, n, 2)) - 1)
        if r % 2 == 0:
            np.testing.assert_allclose(got["evens_sum"], sum(_inputs(n)[0][0::2]))


def test_single_process_world():
    comm.init()
    assert comm.get_rank() == 0 and comm.get_group_size() == 1
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert comm.all_reduce_array(x) is not None and np.array_equal(comm.all_reduce_array(x), x)
    assert np.array_equal(comm.iall_gather(x, axis=1).wait(), x)
    groups = ParallelGroups.build()
    assert (groups.data_parallel, groups.model_parallel, groups.pipeline_stages) == (1, 1, 1)
    assert groups.coords() == (0, 0, 0)


def test_layout_degrees_must_fill_the_world():
    comm.init()
    with pytest.raises(ParallelConfigError, match=r"data_parallel=2 x model_parallel=1 x pipeline_stages=1 = 2 must equal"):
        ParallelGroups.build(2, 1, 1)


def test_unknown_group_lists_known_ones():
    comm.init()
    with pytest.raises(KeyError, match="known: .*world"):
        comm.get_group("no-such-group")
