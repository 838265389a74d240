"""The t5_copy job: outputs, eval reload, and dp2 / optimizer-shard runs equal to one rank."""
import json

import numpy as np
import pytest

from ._run import BIN, run_cli

TINY = ["model.vocab_size=16", "model.hidden_size=16", "model.num_layers=1", "model.num_heads=2",
        "model.ffn_hidden_size=32", "data.length=6", "data.eval_sequences=16", "train.steps=20",
        "train.log_every=10", "train.batch_size=8", "train.dataset_sink_mode=false"]


def _result(proc):
    return json.loads([l for l in proc.stdout.splitlines() if l.startswith("t5_copy: ")][-1][len("t5_copy: "):])


def _losses(out):
    return json.loads((out / "history.json").read_text())["step_loss"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("t5")
    return out, run_cli("t5_copy", out, *TINY)


def test_train_outputs_and_eval(trained):
    out, proc = trained
    result = _result(proc)
    assert (out / "t5_copy.ckpt").is_file() and (out / "curves.png").is_file()
    losses = _losses(out)
    assert len(losses) == 20 and np.mean(losses[-5:]) < np.mean(losses[:5])
    evaluated = _result(run_cli("t5_copy", out, *TINY, "run_mode=eval", f"load_checkpoint={out / 't5_copy.ckpt'}"))
    assert evaluated["copy_acc"] == result["copy_acc"]


def test_sink_mode_equals_eager(trained, tmp_path):
    run_cli("t5_copy", tmp_path, *TINY, "train.dataset_sink_mode=true")
    np.testing.assert_allclose(_losses(tmp_path), _losses(trained[0]), rtol=0, atol=1e-4)


@pytest.mark.skipif(not (BIN / "mpiexec").exists(), reason="needs mpiexec")
@pytest.mark.parametrize("layout", [["parallel_config.data_parallel=2"],
                                    ["parallel_config.data_parallel=2", "parallel_config.optimizer_shard=true"]],
                         ids=["dp2", "dp2_opt_shard"])
def test_two_ranks_equal_one(trained, tmp_path, layout):
    run_cli("t5_copy", tmp_path, *TINY, *layout, ranks=2)
    np.testing.assert_allclose(_losses(tmp_path), _losses(trained[0]), rtol=0, atol=1e-5)


@pytest.mark.skipif(not (BIN / "mpiexec").exists(), reason="needs mpiexec")
def test_auto_layout_prints_a_data_parallel_split_and_equals_one_rank(trained, tmp_path):
    proc = run_cli("t5_copy", tmp_path, *TINY, "parallel_config=auto", ranks=2)
    printed = [line for line in proc.stdout.splitlines() if line.startswith("parallel_config=auto chose: ")]
    assert len(printed) == 1 and "parallel_config.data_parallel=2 " in printed[0]
    assert "model_parallel" not in printed[0] and "pipeline" not in printed[0]
    np.testing.assert_allclose(_losses(tmp_path), _losses(trained[0]), rtol=0, atol=1e-5)


def test_copy_batches_target_is_the_source_prefix():
    from mstrain.transformer.t5_jobs import copy_batches
    source, decoder_input, labels = copy_batches(np.random.default_rng(0), 2, 3, 8, 16, 5)
    assert source.shape == (2, 3, 8) and labels.shape == decoder_input.shape == (2, 3, 5)
    np.testing.assert_array_equal(labels, source[..., :5])
    np.testing.assert_array_equal(decoder_input[..., 1:], labels[..., :-1])
    assert (decoder_input[..., 0] == 0).all() and source.min() >= 2


def test_target_prefix_trains_and_a_longer_target_exits_2(tmp_path):
    proc = run_cli("t5_copy", tmp_path, *TINY, "data.target_length=3")
    losses = _losses(tmp_path)
    assert len(losses) == 20 and np.mean(losses[-5:]) < np.mean(losses[:5])
    assert 0.0 <= _result(proc)["copy_acc"] <= 1.0
    proc = run_cli("t5_copy", tmp_path / "bad", *TINY, "data.target_length=7", check=False)
    assert proc.returncode == 2 and "data.target_length" in proc.stderr and "data.length (6)" in proc.stderr
