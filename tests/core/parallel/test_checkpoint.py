"""Distributed checkpoints: every rank saves its shard plus a strategy file; merge, offline
transform and direct resume onto another layout all continue the single-process run."""
import json

import numpy as np
import pytest

from ._mpi import load_ranks, run_mpi, run_single

STEPS_BEFORE, STEPS_AFTER = 3, 2


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Single-process reference of all steps, and a dp=2 x mp=2 run (ZeRO-sharded state) saved midway."""
    root = tmp_path_factory.mktemp("ckpt")
    run_single("ckpt.py", root / "single", "train", 0, STEPS_BEFORE + STEPS_AFTER, 1, "plain", "momentum")
    run_mpi("ckpt.py", 4, root / "first", "train", 0, STEPS_BEFORE, 2, "zero", "momentum", root / "dir")
    return root, load_ranks(root / "single", 1)[0]


def _assert_matches(got_ranks, want):
    for r, got in enumerate(got_ranks):
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-5, err_msg=f"rank {r}: {key}")


def test_each_rank_saves_its_shard_and_the_strategy_names_every_layout(saved):
    root, _ = saved
    strategy = json.loads((root / "dir" / "strategy.json").read_text())
    assert sorted(strategy["ranks"]) == ["0", "1", "2", "3"] and strategy["world_size"] == 4
    entries = strategy["ranks"]["0"]
    table = entries["embed.embedding_table"]
    assert table["global_shape"] == [16, 8] and table["local_shape"] == [8, 8]
    assert table["layout"]["dev_matrix"] == [2, 2] and table["layout"]["tensor_map"] == [1, -1]
    moments = entries["moments.embed.embedding_table"]
    assert moments["opt_shard"]["group"] == [0, 2]  # the data-parallel group of rank 0
    assert all((root / "dir" / f"rank_{r}.ckpt").is_file() for r in range(4))


@pytest.mark.parametrize("n,mp", [(4, 1), (4, 4), (2, 2)])
def test_resume_directly_onto_another_layout(tmp_path, saved, n, mp):
    root, want = saved
    run_mpi("ckpt.py", n, tmp_path, "resume", STEPS_BEFORE, STEPS_AFTER, mp, "plain", "momentum", root / "dir")
    _assert_matches(load_ranks(tmp_path, n), want)


def test_merge_writes_one_full_checkpoint(tmp_path, saved, mstrain):
    root, want = saved
    merged = tmp_path / "full.ckpt"
    code, out, err = mstrain("ckpt", "merge", "--dir", str(root / "dir"), "--output", str(merged))
    assert code == 0, err
    run_single("ckpt.py", tmp_path / "out", "resume_full", STEPS_BEFORE, STEPS_AFTER, 1, "plain", "momentum", merged)
    _assert_matches(load_ranks(tmp_path / "out", 1), want)


def test_transform_reshards_offline_for_a_destination_strategy(tmp_path, saved, mstrain):
    root, want = saved
    run_mpi("ckpt.py", 2, tmp_path / "s", "strategy", 0, 0, 2, "zero", "momentum", tmp_path / "dst_strategy")
    code, out, err = mstrain("ckpt", "transform", "--src-dir", str(root / "dir"), "--dst-strategy",
                             str(tmp_path / "dst_strategy" / "strategy.json"), "--dst-dir", str(tmp_path / "moved"))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "moved").glob("rank_*.ckpt")) == ["rank_0.ckpt", "rank_1.ckpt"]
    run_mpi("ckpt.py", 2, tmp_path / "out", "resume", STEPS_BEFORE, STEPS_AFTER, 2, "zero", "momentum", tmp_path / "moved")
    _assert_matches(load_ranks(tmp_path / "out", 2), want)


def test_merge_of_a_missing_directory_is_a_user_error(tmp_path, mstrain):
    code, out, err = mstrain("ckpt", "merge", "--dir", str(tmp_path / "nope"), "--output", str(tmp_path / "x.ckpt"))
    assert code == 2 and "strategy file not found" in err


# Adam(W) tolerance. Adam divides each update by sqrt(v) + eps, so rounding noise is amplified
# where the exact gradient is zero: the attention key bias has none (softmax ignores a shift of
# all scores), and each layout's float32 noise (~1e-10) there becomes a step of lr*|g|/(|g|+eps).
# With eps=1e-6 (MindSpore's AdamWeightDecay default) and lr=0.01 that stays below ~5e-6 over the
# 5 steps; every other parameter matches to ~3e-7. 1e-4 leaves room for that noise while a wrong
# resume (moments lost, step count reset: bias correction off) moves the weights by ~1e-2.
ADAM_ATOL = 1e-4


@pytest.fixture(scope="module")
def saved_adam(tmp_path_factory):
    """AdamW: single-process reference, and a dp=2 x mp=2 run with ZeRO-sharded moments saved midway."""
    root = tmp_path_factory.mktemp("ckpt_adam")
    run_single("ckpt.py", root / "single", "train", 0, STEPS_BEFORE + STEPS_AFTER, 1, "plain", "adamw")
    run_mpi("ckpt.py", 4, root / "first", "train", 0, STEPS_BEFORE, 2, "zero", "adamw", root / "dir")
    return root, load_ranks(root / "single", 1)[0]


@pytest.mark.parametrize("n,mp", [(4, 1), (4, 4)])
def test_adamw_resume_onto_another_layout(tmp_path, saved_adam, n, mp):
    root, want = saved_adam
    strategy = json.loads((root / "dir" / "strategy.json").read_text())
    assert strategy["ranks"]["0"]["moment2.embed.embedding_table"]["opt_shard"] is not None  # moments were sharded
    run_mpi("ckpt.py", n, tmp_path, "resume", STEPS_BEFORE, STEPS_AFTER, mp, "plain", "adamw", root / "dir")
    for r, got in enumerate(load_ranks(tmp_path, n)):
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=0, atol=ADAM_ATOL, err_msg=f"rank {r}: {key}")
