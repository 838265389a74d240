"""nn.EmbeddingLookup: every slice_mode trains under semi_auto_parallel on 2 ranks to the weights of
one process on the global batch; bad arguments get one error naming the argument."""
import numpy as np
import pytest

from mstrain import Tensor, nn

from ._mpi import load_ranks, run_mpi, run_single


MODES = ("batch_slice", "table_row_slice", "table_column_slice", "field_slice")


def test_slice_modes_train_like_one_process(tmp_path):
    run_single("embedding_lookup.py", tmp_path / "one", 3, "batch_slice")
    single = {k.split("/", 1)[1]: v for k, v in load_ranks(tmp_path / "one", 1)[0].items()}
    initial = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    assert np.abs(single["embedding.embedding_table"] - initial).max() > 1e-3  # the table did train
    proc = run_mpi("embedding_lookup.py", 2, tmp_path / "two", 3, ",".join(MODES + ("uneven_rows",)))
    assert proc.stdout.count("vocab_size=9 must be divisible by the 2 ranks for slice_mode='table_row_slice'") == 2
    for r, got in enumerate(load_ranks(tmp_path / "two", 2)):
        for mode in MODES:
            for key in single:
                if key != "gathered":
                    np.testing.assert_allclose(got[f"{mode}/{key}"], single[key], rtol=0, atol=1e-5,
                                               err_msg=f"rank {r}, {mode}: {key}")
            if mode != "batch_slice":  # the table is cut: each rank needs every rank's ids
                assert int(got[f"{mode}/gathered"]) > 0, mode


@pytest.mark.parametrize("kwargs,culprit", [({"slice_mode": "row_slice"}, "slice_mode"),
                                            ({"target": "GPU"}, "target"),
                                            ({"max_norm": 0.0}, "max_norm"),
                                            ({"vocab_cache_size": 4}, "vocab_cache_size")])
def test_bad_arguments_are_named(kwargs, culprit):
    with pytest.raises(ValueError, match=culprit):
        nn.EmbeddingLookup(8, 4, **kwargs)


@pytest.mark.parametrize("target", ["CPU", "DEVICE"])
def test_lookup_and_max_norm(target):
    table = np.random.default_rng(1).standard_normal((6, 3)).astype(np.float32)
    ids = np.array([[0, 5], [2, 2]], np.int32)
    plain = nn.EmbeddingLookup(6, 3, param_init=Tensor(table), target=target)
    np.testing.assert_allclose(plain(Tensor(ids)).asnumpy(), table[ids], atol=0)
    clipped = nn.EmbeddingLookup(6, 3, param_init=Tensor(table), target=target, max_norm=0.5)
    rows = table[ids]
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    np.testing.assert_allclose(clipped(Tensor(ids)).asnumpy(), rows * np.minimum(1.0, 0.5 / norms), atol=1e-6)
