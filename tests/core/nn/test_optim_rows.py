"""Optimizers given RowTensor gradients update exactly those rows, as dense numpy references do."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Parameter, RowTensor, Tensor, nn

ROWS, DIM = 12, 3


def _steps(seed=0, steps=3):
    """Per step: unique row ids and their gradient rows (row 11 is never touched)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        ids = np.sort(rng.choice(ROWS - 1, size=4, replace=False))
        out.append((ids, rng.normal(size=(4, DIM)).astype(np.float32)))
    return out


def _dense(ids, values):
    g = np.zeros((ROWS, DIM), np.float64)
    g[ids] = values
    return g


def _adam_reference(w, steps, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0):
    """LazyAdam: moments and values of the touched rows only, MindSpore's bias-corrected step."""
    w, m, v = w.astype(np.float64).copy(), np.zeros_like(w, np.float64), np.zeros_like(w, np.float64)
    for t, (ids, values) in enumerate(steps, start=1):
        g = values + wd * w[ids]
        m[ids] = b1 * m[ids] + (1 - b1) * g
        v[ids] = b2 * v[ids] + (1 - b2) * g * g
        w[ids] -= lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m[ids] / (np.sqrt(v[ids]) + eps)
    return w


def _sgd_reference(w, steps, lr, wd=0.0):
    w = w.astype(np.float64).copy()
    for ids, values in steps:
        w -= lr * (_dense(ids, values) + wd * w * (_dense(ids, values) != 0).any(1, keepdims=True))
    return w


def _adagrad_reference(w, steps, lr, accum0):
    w, accum = w.astype(np.float64).copy(), np.full(w.shape, accum0, np.float64)
    for ids, values in steps:
        g = _dense(ids, values)
        accum += g * g
        w -= lr * g / np.sqrt(accum)
    return w


def _ftrl_reference(w, steps, lr, l1, l2):
    w, n, z = w.astype(np.float64).copy(), np.full(w.shape, 0.1), np.zeros(w.shape)
    for ids, values in steps:
        g = values.astype(np.float64)
        n_new = n[ids] + g * g
        z[ids] += g - (np.sqrt(n_new) - np.sqrt(n[ids])) / lr * w[ids]
        n[ids] = n_new
        zi = z[ids]
        w[ids] = np.where(np.abs(zi) > l1, (np.sign(zi) * l1 - zi) / (np.sqrt(n_new) / lr + 2 * l2), 0.0)
    return w


CASES = [
    ("lazy_adam", lambda p: nn.LazyAdam([p], learning_rate=0.1), lambda w, s: _adam_reference(w, s, 0.1)),
    ("lazy_adam_wd", lambda p: nn.LazyAdam([p], learning_rate=0.1, weight_decay=0.05),
     lambda w, s: _adam_reference(w, s, 0.1, wd=0.05)),
    ("sgd", lambda p: nn.SGD([p], learning_rate=0.2, weight_decay=0.1), lambda w, s: _sgd_reference(w, s, 0.2, 0.1)),
    ("adagrad", lambda p: nn.Adagrad([p], accum=0.1, learning_rate=0.3), lambda w, s: _adagrad_reference(w, s, 0.3, 0.1)),
    ("ftrl", lambda p: nn.FTRL([p], learning_rate=0.5, l1=0.01, l2=0.1), lambda w, s: _ftrl_reference(w, s, 0.5, 0.01, 0.1)),
]


@pytest.mark.parametrize("name,make,reference", CASES, ids=[c[0] for c in CASES])
def test_row_updates_match_the_reference_and_leave_other_rows_alone(name, make, reference):
    w0 = np.random.default_rng(5).normal(size=(ROWS, DIM)).astype(np.float32)
    steps = _steps()
    param = Parameter(Tensor(w0.copy()), name="table")
    opt = make(param)
    for ids, values in steps:
        assert opt((RowTensor(Tensor(ids), Tensor(values), (ROWS, DIM), coalesced=True),)) is True
    np.testing.assert_allclose(param.asnumpy(), reference(w0, steps), rtol=2e-5, atol=1e-6)
    np.testing.assert_array_equal(param.asnumpy()[ROWS - 1], w0[ROWS - 1])


# dense SGD decays every row; its row-wise update (MindSpore's sparse SGD) only the touched ones
TWINS = [c for c in CASES if c[0] != "sgd"] + [("sgd", lambda p: nn.SGD([p], learning_rate=0.2), None)]


@pytest.mark.parametrize("name,make,reference", TWINS, ids=[c[0] for c in TWINS])
def test_a_row_gradient_equals_its_dense_twin(name, make, reference):
    w0 = np.random.default_rng(6).normal(size=(ROWS, DIM)).astype(np.float32)
    sparse_param = Parameter(Tensor(w0.copy()), name="table")
    dense_param = Parameter(Tensor(w0.copy()), name="table")
    sparse_opt, dense_opt = make(sparse_param), make(dense_param)
    for ids, values in _steps(seed=3):
        sparse_opt((RowTensor(Tensor(ids), Tensor(values), (ROWS, DIM), coalesced=True),))
        dense_opt((Tensor(_dense(ids, values).astype(np.float32)),))
    np.testing.assert_allclose(sparse_param.asnumpy(), dense_param.asnumpy(), rtol=1e-5, atol=1e-7)


def test_untouched_rows_are_never_read():
    """NaN in rows outside the gradient stays confined there: the update reads only its rows."""
    w0 = np.random.default_rng(7).normal(size=(ROWS, DIM)).astype(np.float32)
    w0[ROWS - 1] = np.nan
    for make in (lambda p: nn.LazyAdam([p], 0.1), lambda p: nn.Adagrad([p]), lambda p: nn.FTRL([p]),
                 lambda p: nn.SGD([p], 0.1)):
        param = Parameter(Tensor(w0.copy()), name="table")
        opt = make(param)
        ids, values = _steps()[0]
        opt((RowTensor(Tensor(ids), Tensor(values), (ROWS, DIM), coalesced=True),))
        assert np.isfinite(param.asnumpy()[:ROWS - 1]).all()


def test_momentum_and_adam_densify_row_gradients():
    w0 = np.ones((ROWS, DIM), np.float32)
    for make in (lambda p: nn.SGD([p], 0.1, momentum=0.9), lambda p: nn.Adam([p], 0.1)):
        a, b = Parameter(Tensor(w0.copy()), name="t"), Parameter(Tensor(w0.copy()), name="t")
        opt_a, opt_b = make(a), make(b)
        for ids, values in _steps(steps=2):
            opt_a((RowTensor(Tensor(ids), Tensor(values), (ROWS, DIM)),))
            opt_b((Tensor(_dense(ids, values).astype(np.float32)),))
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-6)


def test_embedding_lookup_trains_end_to_end_with_lazy_adam():
    ms.set_seed(0)
    cell = nn.EmbeddingLookup(ROWS, DIM)
    opt = nn.LazyAdam(cell.trainable_params(), learning_rate=0.05)
    step = nn.TrainOneStepCell(nn.WithLossCell(_Sum(cell), nn.MSELoss()), opt)
    ids = Tensor(np.array([[1, 2], [2, 5]], np.int32))
    target = Tensor(np.array([1.0, -1.0], np.float32))
    before = cell.embedding_table.asnumpy().copy()
    losses = [float(step(ids, target).asnumpy()) for _ in range(30)]
    assert losses[-1] < 0.1 * losses[0]
    after = cell.embedding_table.asnumpy()
    untouched = [r for r in range(ROWS) if r not in (1, 2, 5)]
    np.testing.assert_array_equal(after[untouched], before[untouched])


class _Sum(nn.Cell):
    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding

    def construct(self, ids):
        return self.embedding(ids).sum(axis=(1, 2))
