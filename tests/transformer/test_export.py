"""The transformer kit's GPT exported to ONNX: onnxruntime's logits match the suite's."""
import numpy as np
import pytest

import mstrain as ms
from mstrain.transformer import GPT, GPTConfig

onnx = pytest.importorskip("onnx", reason="onnx is optional (export to ONNX)")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is optional (runs exported models in tests)")


@pytest.mark.parametrize("pad", [1, 8])
def test_gpt_logits_match_onnxruntime(tmp_path, pad):
    ms.set_seed(0)
    config = GPTConfig(vocab_size=23, num_layers=2, num_heads=2, hidden_size=16, seq_length=8, vocab_pad_multiple=pad)
    gpt = GPT(config)
    gpt.set_train(False)
    ids = np.random.default_rng(0).integers(0, config.vocab_size, (2, config.seq_length)).astype(np.int32)
    path = ms.export(gpt, ms.Tensor(ids), file_name=str(tmp_path / "gpt"), file_format="ONNX")
    onnx.checker.check_model(onnx.load(path))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got, = session.run(None, {session.get_inputs()[0].name: ids})
    want = gpt(ms.Tensor(ids)).asnumpy()
    assert got.shape == want.shape and np.abs(want).max() > 1e-3
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
