"""Every parallel mode trains the same numbers eagerly, in GRAPH_MODE and sunk (loop sink), on 2
ranks as in one process on the global batch (pipe: two stages, 1F1B over two micro-batches, against
one process accumulating them); the compiled runs really are compiled (a graph was built, no
warning said a step runs eagerly) and a sunk step never calls back into Python (its collectives
and point-to-point transfers are C kernels of the plan)."""
import numpy as np
import pytest

from ._mpi import load_ranks, run_mpi, run_single

STEPS = 6
_META = {"compiled", "python_calls", "eager_warnings", "warning_text", "python_kernels"}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    cache = {}

    def get(mode):
        if mode not in cache:
            out = tmp_path_factory.mktemp(f"single_{mode}")
            run_single("sink_modes.py", out, STEPS, mode, "eager")
            cache[mode] = load_ranks(out, 1)[0]
        return cache[mode]
    return get


def _same_parameters(got, want, what):
    """The parameters this rank holds (a pipeline stage holds its own) equal `want`'s."""
    keys = (set(want) - _META) & set(got)
    assert keys, what
    for key in sorted(keys):
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=2e-6, err_msg=f"{what}: {key}")


@pytest.mark.parametrize("mode", ["dp", "zero", "semi", "auto", "pipe"])
def test_eager_graph_and_sink_agree_with_one_process(tmp_path, single, mode):
    want = single(mode)
    runs = {}
    for runner in ("eager", "graph", "sink"):
        run_mpi("sink_modes.py", 2, tmp_path / runner, STEPS, mode, runner, timeout=90)
        runs[runner] = load_ranks(tmp_path / runner, 2)
    for runner, ranks in runs.items():
        assert set().union(*ranks) >= set(want) - _META, f"{runner}: some parameters are on no rank"
        for r, got in enumerate(ranks):
            what = f"{mode} {runner} rank {r}"
            _same_parameters(got, want, what)
            _same_parameters(got, runs["eager"][r], what + " vs eager")
            if runner != "eager":
                assert int(got["compiled"]) >= 1, what
                assert int(got["eager_warnings"]) == 0, f"{what}: {got['warning_text']}"
    for got in runs["sink"]:
        assert int(got["python_calls"]) == 0, str(got["python_kernels"])


@pytest.mark.parametrize("mode", ["dp", "pipe"])
def test_sink_on_four_ranks(tmp_path, single, mode):
    """dp over 4 replicas; pipe: 2 stages of 2 ranks, each stage run by the semi-auto interpreter."""
    run_mpi("sink_modes.py", 4, tmp_path, STEPS, mode, "sink", timeout=150)
    ranks = load_ranks(tmp_path, 4)
    assert set().union(*ranks) >= set(single(mode)) - _META
    for r, got in enumerate(ranks):
        _same_parameters(got, single(mode), f"rank {r}")
        assert int(got["compiled"]) >= 1 and int(got["eager_warnings"]) == 0, str(got["warning_text"])
        assert int(got["python_calls"]) == 0, str(got["python_kernels"])
