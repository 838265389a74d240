"""The gpt_char job from the CLI: train writes its outputs, eval reloads the same weights, predict
generates from the checkpoint, finetune continues from it."""
import json
from pathlib import Path

import numpy as np
import pytest

from mstrain.transformer import pipeline

from ._run import run_job, step_losses


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpt_char")
    proc = run_job(out, "train.dataset_sink_mode=true", "train.eval_every=2")
    return out, proc


def _result(proc):
    line = [l for l in proc.stdout.splitlines() if l.startswith("gpt_char: ")][-1]
    return json.loads(line[len("gpt_char: "):])


def test_train_writes_checkpoint_curve_history(trained):
    out, proc = trained
    for name in ("gpt_char.ckpt", "tokenizer.json", "config.json", "history.json", "loss_curve.png"):
        assert (out / name).is_file(), name
    assert (out / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    history = json.loads((out / "history.json").read_text())
    assert [r["step"] for r in history["records"]] == [2, 4, 6]
    assert all("val_loss" in r and r["tokens_per_s"] > 0 for r in history["records"])
    assert len(history["step_loss"]) == 6 and history["step_loss"][-1] < history["step_loss"][0]
    assert "tokens/s" in proc.stderr + proc.stdout


def test_sink_mode_trains_the_same_steps_as_eager(trained, tmp_path):
    run_job(tmp_path)  # eager: one host round trip per step
    np.testing.assert_allclose(step_losses(tmp_path), step_losses(trained[0]), rtol=0, atol=1e-4)


def test_eval_reloads_the_trained_weights(trained):
    out, proc = trained
    evaluated = run_job(out, "run_mode=eval", f"load_checkpoint={out / 'gpt_char.ckpt'}")
    want = _result(proc)["val_loss"]
    got = _result(evaluated)
    assert abs(got["val_loss"] - want) < 1e-6 and abs(got["perplexity"] - np.exp(want)) < 1e-4
    assert "perplexity" in evaluated.stdout


def test_predict_generates_from_the_checkpoint(trained):
    out, _ = trained
    args = ("run_mode=predict", f"load_checkpoint={out / 'gpt_char.ckpt'}", "prompt=ROMEO:", "max_new_tokens=30",
            "do_sample=false")
    text = _result(run_job(out, *args))["text"]
    assert text.startswith("ROMEO:") and len(text) == 36
    # the same weights through the Python API give the same greedy text
    assert pipeline("text_generation", model=str(out))("ROMEO:", max_new_tokens=30)[0]["generated_text"] == text


def test_finetune_starts_from_the_checkpoint(trained, tmp_path):
    out, _ = trained
    run_job(tmp_path, "run_mode=finetune", f"load_checkpoint={out / 'gpt_char.ckpt'}")
    first = step_losses(tmp_path)[0]
    assert first < step_losses(out)[0] - 0.05  # it does not start from the random weights


def test_missing_checkpoint_exits_2(tmp_path):
    proc = run_job(tmp_path, "run_mode=eval", check=False)
    assert proc.returncode == 2 and "load_checkpoint" in proc.stderr
    proc = run_job(tmp_path, "run_mode=predict", f"load_checkpoint={Path(tmp_path) / 'none.ckpt'}", check=False)
    assert proc.returncode == 2 and "none.ckpt not found" in proc.stderr
