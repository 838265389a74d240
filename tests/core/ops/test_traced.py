"""The ops under a compiled graph: same values and gradients as eager, fresh random draws per run."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, ops

jit_module = pytest.importorskip("mstrain.jit")


@pytest.fixture(autouse=True)
def _no_fusion(monkeypatch):
    monkeypatch.setenv("MSTRAIN_DISABLE_FUSION", "1")  # these tests are about the ops, not the fusion pass


def test_dropout_draws_a_fresh_mask_on_every_compiled_run():
    ms.set_seed(0)
    f = jit_module.jit(lambda x: ops.dropout(x, 0.5))
    x = Tensor(np.ones((8, 16), np.float32))
    masks = [f(x).asnumpy() for _ in range(3)]
    assert f.compile_count == 1
    assert not np.array_equal(masks[1], masks[2])
    ms.set_seed(0)
    np.testing.assert_array_equal(f(x).asnumpy(), masks[0])  # set_seed replays the compiled draws too


def _loss(table, ids, labels, segments):
    rows = ops.embedding_lookup(table, ids)                         # (2, 2, 4)
    h = ops.layer_norm(ops.gelu(ops.sum(rows, 1)), None, None)      # (2, 4)
    flat = ops.reshape(rows, (4, 4))
    h = h + ops.unsorted_segment_sum(flat, segments, 2) + ops.unsorted_segment_max(flat, segments, 2)
    h = h + ops.unsorted_segment_mean(flat, segments, 2) + ops.sum(ops.topk(h, 2)[0])
    h = ops.clip_by_global_norm((h,), 5.0)[0]
    return ops.mean(ops.softmax_cross_entropy(h, labels)) + ops.sum(ops.one_hot(labels, 4))


def test_compiled_gradient_matches_eager():
    rng = np.random.default_rng(0)
    args = (Tensor(rng.standard_normal((10, 4)).astype(np.float32)), Tensor(np.array([[1, 2], [3, 3]])),
            Tensor(np.array([0, 3])), np.array([0, 1, 1, 0]))
    eager = ms.value_and_grad(_loss)
    compiled = jit_module.jit(ms.value_and_grad(_loss))
    want_loss, want_grad = eager(*args)
    for _ in range(2):  # first call traces, second runs the compiled graph
        loss, grad = compiled(*args)
        np.testing.assert_allclose(loss.asnumpy(), want_loss.asnumpy(), rtol=1e-6)
        np.testing.assert_allclose(grad.asnumpy(), want_grad.asnumpy(), rtol=1e-5, atol=1e-7)
