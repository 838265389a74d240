"""Every graph primitive of gnn.ops: value against a dense numpy reference, gradient against finite
differences (one table), and second-order gradients for the ops whose VJPs are themselves ops."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor
from mstrain.ops import functional as F
from mstrain.gnn import SparsePattern
from mstrain.gnn import ops as G

ROWS, COLS, HEADS, WIDTH, NNZ = 6, 5, 2, 3, 16


def _pattern():
    rng = np.random.default_rng(0)
    rows = np.concatenate([rng.integers(1, ROWS - 1, NNZ - 2), [1, 1]])  # rows 0 and 5 stay empty
    pattern, _ = SparsePattern.from_coo(rows, rng.integers(0, COLS, NNZ), (ROWS, COLS))
    return pattern


PATTERN = _pattern()
DENSE_ADJ = np.zeros((ROWS, COLS), int)
np.add.at(DENSE_ADJ, (PATTERN.row, PATTERN.indices), 1)  # entry multiplicities (duplicates allowed)


def _dense_of(values):
    """(R, K[, H]) dense matrix of per-entry values (duplicates summed)."""
    out = np.zeros((ROWS, COLS) + values.shape[1:])
    np.add.at(out, (PATTERN.row, PATTERN.indices), values)
    return out


def _ref_segment(x, reduce, fill=0.0):
    out = np.full((ROWS,) + x.shape[1:], fill)
    for r in range(ROWS):
        members = x[PATTERN.row == r]
        if members.size:
            out[r] = reduce(members, axis=0)
    return out


def _ref_edge_softmax(scores):
    out = np.zeros_like(scores)
    for r in range(ROWS):
        m = PATTERN.row == r
        if m.any():
            e = np.exp(scores[m] - scores[m].max(0))
            out[m] = e / e.sum(0)
    return out


def _leaky(x):
    return np.where(x > 0, x, 0.2 * x)


# name, op on Tensors, numpy reference on arrays, input shapes
CASES = [
    ("spmm", lambda v, d: G.spmm(v, d, PATTERN), lambda v, d: _dense_of(v) @ d, [(NNZ,), (COLS, WIDTH)]),
    ("spmm_heads", lambda v, d: G.spmm(v, d, PATTERN),
     lambda v, d: np.einsum("rkh,khf->rhf", _dense_of(v), d), [(NNZ, HEADS), (COLS, HEADS, WIDTH)]),
    ("spmm_t", lambda v, d: G.spmm_t(v, d, PATTERN), lambda v, d: _dense_of(v).T @ d, [(NNZ,), (ROWS, WIDTH)]),
    ("sddmm", lambda a, b: G.sddmm(a, b, PATTERN),
     lambda a, b: (a[PATTERN.row] * b[PATTERN.indices]).sum(-1), [(ROWS, WIDTH), (COLS, WIDTH)]),
    ("sddmm_heads", lambda a, b: G.sddmm(a, b, PATTERN),
     lambda a, b: (a[PATTERN.row] * b[PATTERN.indices]).sum(-1), [(ROWS, HEADS, WIDTH), (COLS, HEADS, WIDTH)]),
    ("edge_softmax", lambda s: G.edge_softmax(s, PATTERN), _ref_edge_softmax, [(NNZ, HEADS)]),
    ("gat_attention", lambda s, d: G.gat_attention(s, d, PATTERN, 0.2),
     lambda s, d: _ref_edge_softmax(_leaky(s[PATTERN.indices] + d[PATTERN.row])), [(COLS, HEADS), (ROWS, HEADS)]),
    ("gather_source", lambda x: G.gather_source(x, PATTERN), lambda x: x[PATTERN.indices], [(COLS, WIDTH)]),
    ("gather_target", lambda x: G.gather_target(x, PATTERN), lambda x: x[PATTERN.row], [(ROWS, WIDTH)]),
    ("scatter_source", lambda x: G.scatter_source(x, PATTERN),
     lambda x: np.stack([x[PATTERN.indices == c].sum(0) for c in range(COLS)]), [(NNZ, WIDTH)]),
    ("segment_sum", lambda x: G.segment_sum(x, PATTERN), lambda x: _ref_segment(x, np.sum), [(NNZ, WIDTH)]),
    ("segment_mean", lambda x: G.segment_mean(x, PATTERN), lambda x: _ref_segment(x, np.mean), [(NNZ, WIDTH)]),
    ("segment_max", lambda x: G.segment_max(x, PATTERN), lambda x: _ref_segment(x, np.max), [(NNZ, WIDTH)]),
    ("transpose_entries", lambda x: G.transpose_entries(x, PATTERN),
     lambda x: x[np.lexsort((PATTERN.row, PATTERN.indices))], [(NNZ, HEADS)]),
    ("head_blockdiag", G.head_blockdiag,
     lambda a: np.stack([np.concatenate([a[h] if g == h else np.zeros(WIDTH) for g in range(HEADS)])
                         for h in range(HEADS)], 1), [(HEADS, WIDTH)]),
]


def _inputs(shapes, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for shape in shapes]


def _finite_difference(fn, arrays, index, weight, eps=1e-6):
    grad = np.zeros_like(arrays[index])
    for position in np.ndindex(grad.shape):
        saved = arrays[index][position]
        arrays[index][position] = saved + eps
        plus = (fn(*arrays) * weight).sum()
        arrays[index][position] = saved - eps
        minus = (fn(*arrays) * weight).sum()
        arrays[index][position] = saved
        grad[position] = (plus - minus) / (2 * eps)
    return grad


@pytest.mark.parametrize("name,op,reference,shapes", CASES, ids=[c[0] for c in CASES])
def test_value_matches_reference(name, op, reference, shapes):
    arrays = _inputs(shapes)
    out = op(*[Tensor(a) for a in arrays]).asnumpy()
    assert out.dtype == np.float64
    assert np.allclose(out, reference(*arrays), atol=1e-12)


@pytest.mark.parametrize("name,op,reference,shapes", CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_finite_differences(name, op, reference, shapes):
    arrays = _inputs(shapes)
    weight = np.random.default_rng(2).standard_normal(reference(*arrays).shape)
    positions = tuple(range(len(arrays)))
    grads = ms.grad(lambda *t: F.sum(op(*t) * Tensor(weight)), grad_position=positions)(
        *[Tensor(a) for a in arrays])
    for index, grad in enumerate(grads):
        numeric = _finite_difference(lambda *a: op(*[Tensor(x) for x in a]).asnumpy(), arrays, index, weight)
        assert np.allclose(grad.asnumpy(), numeric, atol=1e-6), f"{name}: input {index}"


SECOND_ORDER = ["spmm_heads", "sddmm", "edge_softmax", "gat_attention", "gather_source", "segment_max"]


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_second_order_gradient(name):
    """d/dx of <grad_x sum(w * op(x)), v>, by finite differences of the first-order gradient."""
    _, op, reference, shapes = next(c for c in CASES if c[0] == name)
    arrays = _inputs(shapes)
    rng = np.random.default_rng(3)
    weight = rng.standard_normal(reference(*arrays).shape)
    probe = rng.standard_normal(shapes[0])

    def first(*tensors):  # <d loss / d input0, probe> as a function of every input
        g = ms.grad(lambda *t: F.sum(F.square(op(*t)) * Tensor(weight)), grad_position=0)(*tensors)
        return F.sum(g * Tensor(probe))

    analytic = ms.grad(first, grad_position=tuple(range(len(arrays))))(*[Tensor(a) for a in arrays])
    for index, grad in enumerate(analytic):
        numeric = _finite_difference(lambda *a: first(*[Tensor(x) for x in a]).asnumpy(), arrays, index, 1.0)
        assert np.allclose(grad.asnumpy(), numeric, atol=1e-5), f"{name}: input {index}"


def test_ops_run_the_same_without_cpp_kernels(monkeypatch):
    arrays = _inputs([(NNZ, HEADS), (COLS, HEADS, WIDTH)])
    with_kernels = G.spmm(Tensor(arrays[0]), Tensor(arrays[1]), PATTERN).asnumpy()
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    without = G.spmm(Tensor(arrays[0]), Tensor(arrays[1]), PATTERN).asnumpy()
    assert np.allclose(with_kernels, without, atol=1e-12)
    assert DENSE_ADJ.sum() == NNZ
