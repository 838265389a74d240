"""ViT: patches and forward against numpy, the vit_mnist job (outputs, eval reload, mp2 equality)."""
import json
import math

import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor
from mstrain.transformer.vit import ViT, ViTConfig

from ._run import BIN, run_cli
from .test_gpt import _dense, _gelu, _layer_norm, _np


def test_patches_are_row_major_squares():
    net = ViT(ViTConfig(image_size=8, patch_size=4, channels=1, hidden_size=8, num_layers=1, num_heads=2,
                        ffn_hidden_size=8))
    image = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)
    patches = net.patches(Tensor(image)).asnumpy()
    assert patches.shape == (1, 4, 16)
    np.testing.assert_array_equal(patches[0, 1], image[0, 0, :4, 4:].reshape(-1))  # top-right square
    np.testing.assert_array_equal(patches[0, 2], image[0, 0, 4:, :4].reshape(-1))


def test_forward_matches_numpy_reference():
    ms.set_seed(2)
    c = ViTConfig(image_size=8, patch_size=4, hidden_size=8, num_layers=2, num_heads=2, ffn_hidden_size=16,
                  init_std=0.3)
    net = ViT(c)
    images = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    got = net(Tensor(images)).asnumpy()
    x = _dense(net.patches(Tensor(images)).asnumpy().astype(np.float64), net.patch_embedding)
    x = np.concatenate([np.broadcast_to(_np(net.cls_token), (3, 1, 8)), x], 1) + _np(net.positions)
    d = 4
    split = lambda a: a.reshape(3, 5, 2, d).transpose(0, 2, 1, 3)  # noqa: E731
    for block in net.blocks:
        h = _layer_norm(x, block.attention_norm)
        att = block.attention
        q, k, v = split(_dense(h, att.query)), split(_dense(h, att.key)), split(_dense(h, att.value))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)  # bidirectional: no mask
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        x = x + _dense((p @ v).transpose(0, 2, 1, 3).reshape(x.shape), att.projection)
        x = x + _dense(_gelu(_dense(_layer_norm(x, block.mlp_norm), block.mlp.mapping)), block.mlp.projection)
    want = _dense(_layer_norm(x[:, 0], net.final_norm), net.head)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


TINY = ["model.num_layers=1", "model.hidden_size=32", "model.ffn_hidden_size=64", "data.train_size=256",
        "data.test_size=100", "train.epochs=2", "train.batch_size=32", "train.dataset_sink_mode=false"]


def _losses(out):
    return json.loads((out / "history.json").read_text())["step_loss"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("vit")
    proc = run_cli("vit_mnist", out, *TINY, "optimizer.lr=0.003")
    return out, proc


def test_job_trains_and_eval_reloads(trained):
    out, proc = trained
    assert (out / "vit_mnist.ckpt").is_file() and (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    losses = _losses(out)
    assert len(losses) == 16 and np.mean(losses[-4:]) < np.mean(losses[:4])
    result = json.loads(proc.stdout.splitlines()[-1].split(": ", 1)[1])
    evaluated = run_cli("vit_mnist", out, *TINY, "run_mode=eval", f"load_checkpoint={out / 'vit_mnist.ckpt'}")
    assert json.loads(evaluated.stdout.splitlines()[-1].split(": ", 1)[1])["test_acc"] == result["test_acc"]


@pytest.mark.skipif(not (BIN / "mpiexec").exists(), reason="needs mpiexec")
@pytest.mark.parametrize("layout", [["parallel_config.model_parallel=2"], ["parallel_config.data_parallel=2"]],
                         ids=["mp2", "dp2"])
def test_two_ranks_equal_one(trained, tmp_path, layout):
    run_cli("vit_mnist", tmp_path, *TINY, "optimizer.lr=0.003", *layout, ranks=2)
    np.testing.assert_allclose(_losses(tmp_path), _losses(trained[0]), rtol=0, atol=1e-5)


@pytest.mark.skipif(not (BIN / "mpiexec").exists(), reason="needs mpiexec")
def test_auto_layout_prints_a_vit_split_and_equals_one_rank(trained, tmp_path):
    proc = run_cli("vit_mnist", tmp_path, *TINY, "optimizer.lr=0.003", "parallel_config=auto", ranks=2)
    printed = [line for line in proc.stdout.splitlines() if line.startswith("parallel_config=auto chose: ")]
    assert len(printed) == 1 and "pipeline" not in printed[0]  # once, by rank 0; ViT has no pipeline split
    degrees = dict(item.split("=") for item in printed[0].split(": ", 1)[1].split(" (")[0].split())
    assert int(degrees["parallel_config.data_parallel"]) * int(degrees["parallel_config.model_parallel"]) == 2
    np.testing.assert_allclose(_losses(tmp_path), _losses(trained[0]), rtol=0, atol=1e-5)
