"""ONNX export: onnxruntime runs the written model and matches the suite's own outputs."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import nn, ops
from mstrain.jobs.mlp_mnist import build_network
from mstrain.train.export import ExportError

onnx = pytest.importorskip("onnx", reason="onnx is optional (export to ONNX)")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is optional (runs exported models in tests)")


def _run_onnx(path, feeds):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_mlp_mnist_network_matches_onnxruntime_with_a_dynamic_batch(tmp_path):
    ms.set_seed(0)
    net = build_network([256])
    x = np.random.default_rng(0).standard_normal((4, 784)).astype(np.float32)
    path = ms.export(net, ms.Tensor(x), file_name=str(tmp_path / "mlp"), file_format="ONNX", dynamic_batch=True)
    assert path.endswith("mlp.onnx")
    other_batch = np.random.default_rng(1).standard_normal((7, 784)).astype(np.float32)
    got, = _run_onnx(path, {"input_0": other_batch})
    np.testing.assert_allclose(got, net(ms.Tensor(other_batch)).asnumpy(), rtol=1e-5, atol=1e-5)


class _AttentionBlock(nn.Cell):
    """Embedding, pre-LN causal self-attention and a GELU MLP: the ops of a GPT block."""

    def __init__(self, vocab=11, width=8, heads=2):
        super().__init__()
        self.heads = heads
        self.embedding = nn.Embedding(vocab, width)
        self.norm1, self.norm2 = nn.LayerNorm((width,)), nn.LayerNorm((width,))
        self.qkv, self.proj = nn.Dense(width, 3 * width), nn.Dense(width, width)
        self.fc, self.out = nn.Dense(width, 4 * width), nn.Dense(4 * width, width)
        self.gelu, self.softmax = nn.GELU(), nn.Softmax()

    def construct(self, ids):
        x = self.embedding(ids)                                   # (B, T, C)
        b, t, c = x.shape
        qkv = self.qkv(self.norm1(x))                             # (B, T, 3C)
        q, k, v = qkv[:, :, :c], qkv[:, :, c:2 * c], qkv[:, :, 2 * c:]
        q, k, v = (ops.transpose(z.reshape((b, t, self.heads, c // self.heads)), (0, 2, 1, 3)) for z in (q, k, v))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * float(1.0 / np.sqrt(c // self.heads))
        mask = ms.Tensor(np.triu(np.full((t, t), -1e9, np.float32), 1))
        attention = ops.matmul(self.softmax(scores + mask), v)   # (B, nh, T, hs)
        x = x + self.proj(ops.transpose(attention, (0, 2, 1, 3)).reshape((b, t, c)))
        return x + self.out(self.gelu(self.fc(self.norm2(x))))


def test_attention_block_matches_onnxruntime(tmp_path):
    ms.set_seed(1)
    net = _AttentionBlock()
    net.set_train(True)
    ids = np.array([[1, 4, 2, 9, 0], [3, 3, 7, 10, 5]], np.int32)
    path = ms.export(net, ms.Tensor(ids), file_name=str(tmp_path / "block.onnx"))
    assert net.training  # export switched to inference mode and back
    got, = _run_onnx(path, {"input_0": ids})
    net.set_train(False)
    np.testing.assert_allclose(got, net(ms.Tensor(ids)).asnumpy(), rtol=1e-5, atol=1e-5)


def test_export_errors_name_the_format_and_the_op(tmp_path):
    net = build_network([8])
    x = ms.Tensor(np.zeros((2, 784), np.float32))
    with pytest.raises(ExportError, match="MINDIR.*ONNX|ONNX.*MINDIR"):
        ms.export(net, x, file_name=str(tmp_path / "m"), file_format="MINDIR")

    def sorts(values):
        return ops.sort(values)[0]

    with pytest.raises(ExportError, match="'sort' has no ONNX mapping"):
        ms.export(sorts, ms.Tensor(np.ones((3,), np.float32)), file_name=str(tmp_path / "s"))
    assert not list(tmp_path.iterdir())  # nothing half-written
