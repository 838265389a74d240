"""Multi-head graph kernels over a CSR pattern (rows = targets, columns = sources).

The message-passing steps of GCN and GAT on H heads of F features each:

    graph_spmm(indptr, indices, values, dense)     out[r, h] = sum_{k in row r} values[k, h] * dense[indices[k], h]
    graph_spmm_t(indptr, indices, values, dense, cols)
                                                   out[j, h] = sum_{entries k = (r, j)} values[k, h] * dense[r, h]   (A^T @ dense)
    graph_sddmm(indptr, indices, a, b)             out[k, h] = <a[r, h], b[indices[k], h]>   (k in row r)
    graph_csr_softmax(indptr, scores)              softmax of scores[k, h] over the entries k of each row
    graph_csr_softmax_backward(indptr, alpha, g)   alpha * (g - sum_row(alpha * g)), the VJP of the softmax
    graph_gat_attention(indptr, indices, src, dst, slope)
        alpha[k, h] = softmax over row r of LeakyReLU_slope(src[indices[k], h] + dst[r, h])   (GAT)
    graph_gat_attention_backward(indptr, indices, alpha, g, src, dst, slope) -> (grad_src, grad_dst)

Shapes: values / scores / alpha / g (nnz, H); dense, b (K, H, F); a (R, H, F); src (K, H); dst (R, H). Each function checks
its inputs once, then runs the C++ kernel of `gnn/kernels/src/graph_csr.cpp` (built by setup.py as
`mstrain.gnn.kernels._graph_csr`, reached through `mstrain.kernels.native_module`) when it is built
(and not disabled by MSTRAIN_DISABLE_KERNELS), else the numpy reference `reference_<name>` below; the
tests compare the two. float16 inputs run in float32 and return float16 (fp32 accumulation); the
C++ spmm, spmm_t, sddmm and the GAT attention pair read and write float16 arrays themselves (float32
accumulators; no float32 copies in Python).
"""
import numpy as np

from mstrain.errors import ShapeError
from mstrain.kernels import native_module
from mstrain.kernels.half import to_float16, to_float32

__all__ = ["available", "graph_spmm", "graph_spmm_t", "graph_sddmm", "graph_csr_softmax", "graph_csr_softmax_backward",
           "graph_gat_attention", "graph_gat_attention_backward", "row_reduce"]

_NATIVE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# Kernels whose C++ takes float16 arrays itself (widened there with F16C, float32 kernel, one rounding
# per output): no float32 copies made in Python. The others get float16 operands widened here first.
_HALF_NATIVE = frozenset({"graph_spmm", "graph_spmm_t", "graph_sddmm", "graph_gat_attention",
                          "graph_gat_attention_backward"})


def _native(name, *arrays):
    """The C++ function `name` when the extension is built (and kernels are enabled) and every
    array is C-contiguous, else None."""
    module = native_module("mstrain.gnn", "graph_csr")
    if module is None or not all(a.flags.c_contiguous for a in arrays):
        return None
    return getattr(module, name)


def available(name):
    """True when the C++ kernel `name` will run (built, loadable, not disabled)."""
    module = native_module("mstrain.gnn", "graph_csr")
    return module is not None and hasattr(module, name)


# ---- numpy references ---------------------------------------------------------------------------

def row_reduce(ufunc, x, indptr, fill=0.0):
    """ufunc.reduce over each row's contiguous entries: (nnz, *W) -> (R, *W); empty rows get `fill`."""
    rows = indptr.shape[0] - 1
    out = np.full((rows,) + x.shape[1:], fill, dtype=x.dtype)
    nonempty = indptr[1:] > indptr[:-1]
    if x.shape[0]:
        # Starts of the non-empty rows: each reduceat segment then ends where the row ends.
        out[nonempty] = ufunc.reduceat(x, indptr[:-1][nonempty], axis=0)
    return out


def _row_ids(indptr):
    return np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))


def reference_graph_spmm(indptr, indices, values, dense):
    contributions = values[:, :, None] * dense[indices]  # (nnz, H, F)
    return row_reduce(np.add, contributions, indptr)


def reference_graph_spmm_t(indptr, indices, values, dense, cols):
    contributions = values[:, :, None] * dense[_row_ids(indptr)]  # (nnz, H, F)
    out = np.zeros((cols,) + dense.shape[1:], dtype=contributions.dtype)
    np.add.at(out, indices, contributions)  # reference only: the kernel scatters in one pass
    return out


def reference_graph_sddmm(indptr, indices, a, b):
    return np.einsum("khf,khf->kh", a[_row_ids(indptr)], b[indices])


def reference_graph_csr_softmax(indptr, scores):
    row = _row_ids(indptr)
    peak = row_reduce(np.maximum, scores, indptr, fill=0.0)
    shifted = np.exp(scores - peak[row])
    return shifted / row_reduce(np.add, shifted, indptr)[row]


def reference_graph_csr_softmax_backward(indptr, alpha, grad):
    dot = row_reduce(np.add, alpha * grad, indptr)
    return alpha * (grad - dot[_row_ids(indptr)])


def _gat_pre(indptr, indices, src, dst, slope):
    pre = src[indices] + dst[_row_ids(indptr)]
    return pre, np.where(pre > 0, 1.0, slope).astype(pre.dtype)


def reference_graph_gat_attention(indptr, indices, src, dst, slope):
    pre, _ = _gat_pre(indptr, indices, src, dst, slope)
    return reference_graph_csr_softmax(indptr, np.where(pre > 0, pre, slope * pre))


def reference_graph_gat_attention_backward(indptr, indices, alpha, grad, src, dst, slope):
    _, leaky_slope = _gat_pre(indptr, indices, src, dst, slope)
    g_pre = reference_graph_csr_softmax_backward(indptr, alpha, grad) * leaky_slope
    grad_src = np.zeros_like(src)
    np.add.at(grad_src, indices, g_pre)  # reference only: the kernel scatters in one pass
    return grad_src, row_reduce(np.add, g_pre, indptr)


# ---- checked entry points -----------------------------------------------------------------------

def _check_indptr(indptr, nnz, name):
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    if indptr.ndim != 1 or indptr.shape[0] < 1:
        raise ShapeError(f"{name}: indptr must be (R+1,), got shape {indptr.shape}")
    if indptr[0] != 0 or indptr[-1] != nnz or np.any(indptr[1:] < indptr[:-1]):
        raise ShapeError(f"{name}: indptr must rise from 0 to nnz={nnz}, got {int(indptr[0])}..{int(indptr[-1])}")
    return indptr


def _check_pattern(indptr, indices, n_cols, name):
    indices = np.ascontiguousarray(indices, dtype=np.int64)
    if indices.ndim != 1:
        raise ShapeError(f"{name}: indices must be (nnz,), got shape {indices.shape}")
    indptr = _check_indptr(indptr, indices.shape[0], name)
    if n_cols is not None and indices.size and (indices.min() < 0 or indices.max() >= n_cols):
        raise IndexError(f"{name}: indices must lie in [0, {n_cols}), got {int(indices.min())}..{int(indices.max())}")
    return indptr, indices


def _compute_dtype(*arrays):
    dtype = np.result_type(*arrays)
    if not np.issubdtype(dtype, np.floating):
        raise TypeError(f"graph kernels need float arrays, got {dtype}")
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def _run(name, reference, indexes, floats, out_dtype, scalars=()):
    """Run kernel `name` (C++ when available for these arrays, else numpy) in its compute dtype."""
    compute = _compute_dtype(*floats)
    if name in _HALF_NATIVE and all(a.dtype == np.float16 for a in floats):
        halves = [np.ascontiguousarray(a) for a in floats]
        native = _native(name, *indexes, *halves)
        if native is not None:
            return native(*indexes, *halves, *scalars)
    floats = [to_float32(a) if a.dtype == np.float16 else np.ascontiguousarray(a, dtype=compute) for a in floats]
    arrays = list(indexes) + floats
    native = _native(name, *arrays) if compute in _NATIVE_DTYPES else None
    out = native(*arrays, *scalars) if native is not None else reference(*arrays, *scalars)
    if isinstance(out, tuple):
        return tuple(_as_dtype(o, out_dtype) for o in out)
    return _as_dtype(out, out_dtype)


def _as_dtype(array, dtype):
    if array.dtype == dtype:
        return array
    return to_float16(array) if dtype == np.float16 and array.dtype == np.float32 else array.astype(dtype)


def graph_spmm(indptr, indices, values, dense):
    """Multi-head SpMM: values (nnz, H), dense (K, H, F) -> (R, H, F) (see the module docstring)."""
    dense, values = np.asarray(dense), np.asarray(values)
    indptr, indices = _check_pattern(indptr, indices, dense.shape[0] if dense.ndim else None, "graph_spmm")
    if dense.ndim != 3 or values.shape != (indices.shape[0], dense.shape[1]):
        raise ShapeError(f"graph_spmm: expected values (nnz={indices.shape[0]}, H) and dense (K, H, F) with "
                         f"the same H, got values {values.shape} and dense {dense.shape}")
    out_dtype = np.result_type(values, dense)
    return _run("graph_spmm", reference_graph_spmm, (indptr, indices), (values, dense), out_dtype)


def graph_spmm_t(indptr, indices, values, dense, cols):
    """Transposed multi-head SpMM A^T @ dense: values (nnz, H), dense (R, H, F) -> (cols, H, F)."""
    dense, values = np.asarray(dense), np.asarray(values)
    indptr, indices = _check_pattern(indptr, indices, int(cols), "graph_spmm_t")
    if dense.ndim != 3 or dense.shape[0] != indptr.shape[0] - 1 or values.shape != (indices.shape[0], dense.shape[1]):
        raise ShapeError(f"graph_spmm_t: expected values (nnz={indices.shape[0]}, H) and dense "
                         f"(R={indptr.shape[0] - 1}, H, F), got values {values.shape} and dense {dense.shape}")
    out_dtype = np.result_type(values, dense)
    return _run("graph_spmm_t", reference_graph_spmm_t, (indptr, indices), (values, dense), out_dtype,
                (int(cols),))


def graph_sddmm(indptr, indices, a, b):
    """Per-entry, per-head dot products: a (R, H, F), b (K, H, F) -> (nnz, H)."""
    a, b = np.asarray(a), np.asarray(b)
    indptr, indices = _check_pattern(indptr, indices, b.shape[0] if b.ndim else None, "graph_sddmm")
    if a.ndim != 3 or b.ndim != 3 or a.shape[1:] != b.shape[1:] or a.shape[0] != indptr.shape[0] - 1:
        raise ShapeError(f"graph_sddmm: expected a (R={indptr.shape[0] - 1}, H, F) and b (K, H, F), "
                         f"got {a.shape} and {b.shape}")
    return _run("graph_sddmm", reference_graph_sddmm, (indptr, indices), (a, b), np.result_type(a, b))


def graph_csr_softmax(indptr, scores):
    """Softmax over each row's entries, per head: scores (nnz, H) -> (nnz, H)."""
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ShapeError(f"graph_csr_softmax: scores must be (nnz, H), got {scores.shape}")
    indptr = _check_indptr(indptr, scores.shape[0], "graph_csr_softmax")
    return _run("graph_csr_softmax", reference_graph_csr_softmax, (indptr,), (scores,), scores.dtype)


def graph_csr_softmax_backward(indptr, alpha, grad):
    """VJP of `graph_csr_softmax` at output alpha for output gradient grad, both (nnz, H)."""
    alpha, grad = np.asarray(alpha), np.asarray(grad)
    if alpha.ndim != 2 or alpha.shape != grad.shape:
        raise ShapeError(f"graph_csr_softmax_backward: alpha {alpha.shape} and grad {grad.shape} "
                         f"must both be (nnz, H)")
    indptr = _check_indptr(indptr, alpha.shape[0], "graph_csr_softmax_backward")
    return _run("graph_csr_softmax_backward", reference_graph_csr_softmax_backward, (indptr,),
                (alpha, grad), np.result_type(alpha, grad))


def _check_gat(indptr, indices, src, dst, name):
    src, dst = np.asarray(src), np.asarray(dst)
    indptr, indices = _check_pattern(indptr, indices, src.shape[0] if src.ndim else None, name)
    if src.ndim != 2 or dst.ndim != 2 or src.shape[1] != dst.shape[1] or dst.shape[0] != indptr.shape[0] - 1:
        raise ShapeError(f"{name}: expected src (K, H) and dst (R={indptr.shape[0] - 1}, H), "
                         f"got {src.shape} and {dst.shape}")
    return indptr, indices, src, dst


def graph_gat_attention(indptr, indices, src, dst, slope=0.2):
    """GAT attention coefficients: src (K, H) and dst (R, H) per-node scores -> alpha (nnz, H)."""
    indptr, indices, src, dst = _check_gat(indptr, indices, src, dst, "graph_gat_attention")
    return _run("graph_gat_attention", reference_graph_gat_attention, (indptr, indices), (src, dst),
                np.result_type(src, dst), (float(slope),))


def graph_gat_attention_backward(indptr, indices, alpha, grad, src, dst, slope=0.2):
    """VJP of `graph_gat_attention` at output alpha for output gradient grad: (grad_src, grad_dst)."""
    indptr, indices, src, dst = _check_gat(indptr, indices, src, dst, "graph_gat_attention_backward")
    alpha, grad = np.asarray(alpha), np.asarray(grad)
    if alpha.shape != (indices.shape[0], dst.shape[1]) or grad.shape != alpha.shape:
        raise ShapeError(f"graph_gat_attention_backward: alpha {alpha.shape} and grad {grad.shape} must be "
                         f"({indices.shape[0]}, {dst.shape[1]})")
    return _run("graph_gat_attention_backward", reference_graph_gat_attention_backward, (indptr, indices),
                (alpha, grad, src, dst), np.result_type(src, dst), (float(slope),))
