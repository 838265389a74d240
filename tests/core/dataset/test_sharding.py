"""Data-parallel sharding: disjoint, equal and covering, in-process and under mpiexec."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mstrain import dataset as ds


def shard_rows(n, num_shards, shuffle, **extra):
    out = []
    for shard in range(num_shards):
        data = ds.NumpySlicesDataset({"x": np.arange(n)}, shuffle=shuffle, num_shards=num_shards,
                                     shard_id=shard, **extra)
        out.append([int(r[0]) for r in data.create_tuple_iterator(num_epochs=1, output_numpy=True)])
    return out


@pytest.mark.parametrize("shuffle", [False, True])
def test_divisible_shards_are_disjoint_equal_and_cover(shuffle):
    shards = shard_rows(24, 4, shuffle)
    assert [len(s) for s in shards] == [6] * 4
    assert sorted(sum(shards, [])) == list(range(24))


@pytest.mark.parametrize("shuffle", [False, True])
def test_uneven_shards_pad_by_wrap_around(shuffle):
    shards = shard_rows(10, 4, shuffle)
    assert [len(s) for s in shards] == [3] * 4
    flat = sum(shards, [])
    assert set(flat) == set(range(10)) and len(flat) == 12
    order = shards[0] if not shuffle else None
    if order is not None:
        assert shards == [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]]


def test_shards_follow_the_launcher_environment(monkeypatch):
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "3")
    data = ds.NumpySlicesDataset({"x": np.arange(9)}, shuffle=False)
    assert [int(r[0]) for r in data.create_tuple_iterator(output_numpy=True)] == [1, 4, 7]
    ds.config.set_auto_shard(False)
    try:
        assert ds.NumpySlicesDataset({"x": np.arange(9)}).get_dataset_size() == 9
    finally:
        ds.config.set_auto_shard(True)
    with pytest.raises(ValueError, match="shard_id"):
        ds.NumpySlicesDataset({"x": np.arange(9)}, num_shards=2, shard_id=2)


def test_sharded_batches_and_sizes():
    data = ds.NumpySlicesDataset({"x": np.arange(20)}, shuffle=True, num_shards=2, shard_id=1)
    assert data.get_dataset_size() == 10 and data.batch(4).get_dataset_size() == 3


_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from mstrain import dataset as ds
    data = ds.NumpySlicesDataset({"x": np.arange(21)}, shuffle=True).batch(4)
    got = [b[0].tolist() for b in data.create_tuple_iterator(num_epochs=1, output_numpy=True)]
    print(json.dumps({"size": data.get_dataset_size(), "rows": sum(got, [])}))
""")


def _mpiexec():
    candidates = [os.path.join(os.path.dirname(sys.executable), "mpiexec"),
                  "/work/main/.venv/bin/mpiexec"]
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def _json_objects(text):
    """Every JSON object in `text`: mpiexec forwards the ranks' output in chunks, so one rank's line
    can arrive glued to the other's."""
    decoder, objects, at = json.JSONDecoder(), [], text.find("{")
    while at != -1:
        value, end = decoder.raw_decode(text, at)
        objects.append(value)
        at = text.find("{", end)
    return objects


def test_two_mpi_ranks_read_disjoint_covering_shards(tmp_path):
    mpiexec = _mpiexec()
    if mpiexec is None:
        pytest.skip("mpiexec not found next to the Python interpreter")
    script = tmp_path / "shard_probe.py"
    script.write_text(_SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "PMIX_"))}
    result = subprocess.run([mpiexec, "-n", "2", sys.executable, str(script), root],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    reports = _json_objects(result.stdout)
    assert len(reports) == 2
    assert [r["size"] for r in reports] == [3, 3]     # ceil(ceil(21 / 2) / 4) batches each
    first, second = (r["rows"] for r in reports)
    assert len(first) == len(second) == 11
    assert set(first) | set(second) == set(range(21))
    assert len(set(first) & set(second)) == 1         # one row of wrap-around padding
