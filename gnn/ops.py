"""Differentiable graph primitives over a CSR pattern (rows = targets i, columns = sources j).

Each op is one entry of the core op table (`mstrain.ops.defop`) with its VJP written in ops, so
gradients of gradients work. The forward kernels are `mstrain.kernels` C++ kernels with numpy
references: a reduction "per target" is a reduction over each row's contiguous entries, and a
reduction "per source" one scatter pass in C++ (never `np.add.at` when the kernels are built).

    spmm(values, dense, pattern)       out[i] = sum_{j -> i} values[ij] * dense[j]   GCN / GAT propagation
    spmm_t(values, dense, pattern)     out[j] = sum_{j -> i} values[ij] * dense[i]   A^T @ dense: spmm's gradient
    sddmm(a, b, pattern)               out[ij] = <a[i], b[j]>                         spmm's gradient in values
    edge_softmax(scores, pattern)      softmax of scores over the in-edges of each target
    gat_attention(src, dst, pattern)   edge_softmax(LeakyReLU(src[j] + dst[i])), one fused kernel (GAT)
    head_blockdiag(att)                (H, F) per-head vectors -> (H*F, H) block-diagonal (GAT scores)
    gather_source / gather_target      x[j] / x[i] per edge                           message inputs x_j, x_i
    scatter_source(x, pattern)         sum per-edge data at the sources               gather_source's adjoint
    segment_sum / _mean / _max         reduce per-edge messages at their targets      aggregation
    transpose_entries(x, pattern)      per-entry data in the entry order of the transpose

Per-entry data has shape (nnz,) or (nnz, H) (H heads); node data (N, F) or (N, H, F) respectively.
"""
import numpy as np

from mstrain import kernels
from .kernels import graph as graph_kernels
from mstrain.ops import defop
from mstrain.ops import functional as F
from mstrain import Tensor

__all__ = ["spmm", "spmm_t", "scatter_source", "sddmm", "edge_softmax", "gat_attention", "head_blockdiag",
           "gather_source", "gather_target", "segment_sum", "segment_max", "segment_mean", "transpose_entries",
           "sparse_matmul"]


def _array(x):
    return x.asnumpy() if isinstance(x, Tensor) else np.asarray(x)


def _run_heads(kernel, values, dense, *args):
    """Run a multi-head kernel on (nnz, H) values and (N, H, F) dense; one weight per entry (values
    (nnz,)) with dense (N, ...) runs as a single head and keeps dense's trailing shape."""
    if values.ndim == 2:
        return kernel(values, dense, *args)
    out = kernel(values[:, None], dense.reshape(dense.shape[0], 1, -1), *args)
    return out.reshape((out.shape[0],) + dense.shape[1:])


# ---- entry permutation ---------------------------------------------------------------------------

@defop("gnn_transpose_entries", kind="view", attrs=("pattern",))
def transpose_entries(x, pattern):
    """Per-entry data of `pattern` reordered to the entry order of its transpose."""
    return x[pattern.transpose()[1]]


# The transpose of the transpose is the pattern itself, with the inverse permutation.
transpose_entries.defvjp(lambda ctx, g: transpose_entries(g, ctx.attrs["pattern"].transpose()[0]))


# ---- SpMM and SDDMM ------------------------------------------------------------------------------

@defop("gnn_spmm", attrs=("pattern",))
def spmm(values, dense, pattern):
    """out[i] = sum over the entries (i, j) of `pattern` of values[ij] * dense[j].

    values (nnz,) with dense (K, F) or (K,), or values (nnz, H) with dense (K, H, F) (one weight per
    head). Returns (R, F) / (R,) / (R, H, F) with R = pattern.shape[0].
    """
    return _run_heads(lambda v, d: graph_kernels.graph_spmm(pattern.indptr, pattern.indices, v, d), values, dense)


@spmm.defvjp
def _(ctx, g):
    values, dense = ctx.inputs
    pattern = ctx.attrs["pattern"]
    g_values = sddmm(g, dense, pattern) if ctx.needs[0] else None
    g_dense = spmm_t(values, g, pattern) if ctx.needs[1] else None
    return g_values, g_dense


@defop("gnn_spmm_t", attrs=("pattern",))
def spmm_t(values, dense, pattern):
    """The transposed product A^T @ dense: out[j] = sum over the entries (i, j) of values[ij] * dense[i].

    values (nnz,) with dense (R, F), or (nnz, H) with (R, H, F); returns (K, F) / (K, H, F). A scatter
    in one C++ pass (no transposed copy of the pattern): the gradient of `spmm` in its dense input.
    """
    return _run_heads(lambda v, d: graph_kernels.graph_spmm_t(pattern.indptr, pattern.indices, v, d,
                                                              pattern.shape[1]), values, dense)


@spmm_t.defvjp
def _(ctx, g):
    values, dense = ctx.inputs
    pattern = ctx.attrs["pattern"]
    g_values = sddmm(dense, g, pattern) if ctx.needs[0] else None
    g_dense = spmm(values, g, pattern) if ctx.needs[1] else None
    return g_values, g_dense


@defop("gnn_sddmm", attrs=("pattern",))
def sddmm(a, b, pattern):
    """out[ij] = <a[i], b[j]> for every entry (i, j) of `pattern`: a (R, F), b (K, F) -> (nnz,),
    or per head a (R, H, F), b (K, H, F) -> (nnz, H). (A vector a (R,), b (K,) gives a[i] * b[j].)"""
    if a.ndim <= 2:
        a3 = a.reshape(a.shape[0], 1, -1)
        b3 = b.reshape(b.shape[0], 1, -1)
        return graph_kernels.graph_sddmm(pattern.indptr, pattern.indices, a3, b3)[:, 0]
    return graph_kernels.graph_sddmm(pattern.indptr, pattern.indices, a, b)


@sddmm.defvjp
def _(ctx, g):
    a, b = ctx.inputs
    pattern = ctx.attrs["pattern"]
    g_a = spmm(g, b, pattern) if ctx.needs[0] else None
    g_b = spmm_t(g, a, pattern) if ctx.needs[1] else None
    return g_a, g_b


def sparse_matmul(matrix, dense):
    """`matrix @ dense` for a constant `SparseMatrix` (values not trained), differentiable in dense."""
    return spmm(matrix.values, dense, matrix.pattern)


# ---- edge softmax --------------------------------------------------------------------------------

def _heads2d(x):
    return x[:, None] if x.ndim == 1 else x


@defop("gnn_edge_softmax", attrs=("pattern",))
def edge_softmax(scores, pattern):
    """alpha[ij] = exp(scores[ij]) / sum_{k -> i} exp(scores[ik]): softmax over each target's in-edges,
    per head. scores (nnz,) or (nnz, H)."""
    out = graph_kernels.graph_csr_softmax(pattern.indptr, _heads2d(scores))
    return out.reshape(scores.shape)


@edge_softmax.defvjp
def _(ctx, g):
    return edge_softmax_backward(ctx.out, g, ctx.attrs["pattern"])


@defop("gnn_edge_softmax_backward", attrs=("pattern",))
def edge_softmax_backward(alpha, g, pattern):
    """alpha * (g - sum_{in-edges of the target} alpha * g): the VJP of `edge_softmax`."""
    out = graph_kernels.graph_csr_softmax_backward(pattern.indptr, _heads2d(alpha), _heads2d(g))
    return out.reshape(alpha.shape)


@edge_softmax_backward.defvjp
def _(ctx, w):
    # y = a * (g - S), S = rowsum(a * g): dy/dg is the same map; dy/da = w*(g - S) - g * rowsum(w * a).
    alpha, g = ctx.inputs
    pattern = ctx.attrs["pattern"]
    g_alpha = g_g = None
    if ctx.needs[0]:
        total = gather_target(segment_sum(alpha * g, pattern), pattern)
        total_w = gather_target(segment_sum(w * alpha, pattern), pattern)
        g_alpha = w * (g - total) - g * total_w
    if ctx.needs[1]:
        g_g = edge_softmax_backward(alpha, w, pattern)
    return g_alpha, g_g


# ---- GAT attention ---------------------------------------------------------------------------------

@defop("gnn_gat_attention", attrs=("pattern", "negative_slope"))
def gat_attention(score_src, score_dst, pattern, negative_slope=0.2):
    """alpha[ij] = softmax over the in-edges of i of LeakyReLU(score_src[j] + score_dst[i]), per head.

    score_src (K, H), score_dst (R, H) -> (nnz, H). One fused kernel; equal to
    edge_softmax(leaky_relu(gather_source(score_src) + gather_target(score_dst))).
    """
    return graph_kernels.graph_gat_attention(pattern.indptr, pattern.indices, score_src, score_dst,
                                             negative_slope)


@gat_attention.defvjp
def _(ctx, g):
    score_src, score_dst = ctx.inputs
    return gat_attention_backward(ctx.out, g, score_src, score_dst, ctx.attrs["pattern"],
                                  ctx.attrs["negative_slope"])


@defop("gnn_gat_attention_backward", num_outputs=2, attrs=("pattern", "negative_slope"))
def gat_attention_backward(alpha, g, score_src, score_dst, pattern, negative_slope=0.2):
    """(grad score_src, grad score_dst) of `gat_attention` at output alpha, output gradient g."""
    return graph_kernels.graph_gat_attention_backward(pattern.indptr, pattern.indices, alpha, g, score_src,
                                                      score_dst, negative_slope)


def _leaky_slopes(score_src, score_dst, pattern, negative_slope):
    """LeakyReLU'(pre-activation) per entry: a constant of the backward pass (zero derivative a.e.)."""
    pre = _array(score_src)[pattern.indices] + np.repeat(_array(score_dst), pattern.degree, axis=0)
    return np.where(pre > 0, 1.0, negative_slope).astype(pre.dtype)


@gat_attention_backward.defvjp
def _(ctx, w_src, w_dst):
    # The backward is linear in g: g_pre = slopes * edge_softmax_backward(alpha, g), then the two
    # segment sums. Its adjoint pulls w back along the same path.
    alpha, g, score_src, score_dst = ctx.inputs
    pattern, slope = ctx.attrs["pattern"], ctx.attrs["negative_slope"]
    w_pre = None
    if w_src is not None:
        w_pre = gather_source(w_src, pattern)
    if w_dst is not None:
        part = gather_target(w_dst, pattern)
        w_pre = part if w_pre is None else w_pre + part
    if w_pre is None:
        return None, None, None, None
    w_e = w_pre * _leaky_slopes(score_src, score_dst, pattern, slope)
    g_alpha = g_g = None
    if ctx.needs[0]:
        total = gather_target(segment_sum(alpha * g, pattern), pattern)
        total_w = gather_target(segment_sum(w_e * alpha, pattern), pattern)
        g_alpha = w_e * (g - total) - g * total_w
    if ctx.needs[1]:
        g_g = edge_softmax_backward(alpha, w_e, pattern)
    return g_alpha, g_g, None, None


@defop("gnn_head_blockdiag")
def head_blockdiag(att):
    """(H, F) per-head vectors -> (H*F, H) block-diagonal matrix B with B[h*F + f, h] = att[h, f], so
    that (x.reshape(N, H*F) @ B)[n, h] = <x[n, h], att[h]> is one matrix product for all heads."""
    heads, width = att.shape
    out = np.zeros((heads, width, heads), dtype=att.dtype)
    out[np.arange(heads), :, np.arange(heads)] = att
    return out.reshape(heads * width, heads)


@defop("gnn_head_diagonal_blocks", attrs=("heads",))
def head_diagonal_blocks(matrix, heads):
    """The adjoint of `head_blockdiag`: (H*F, H) -> (H, F), out[h, f] = matrix[h*F + f, h]."""
    blocks = matrix.reshape(heads, -1, heads)
    return blocks[np.arange(heads), :, np.arange(heads)]


head_blockdiag.defvjp(lambda ctx, g: head_diagonal_blocks(g, ctx.inputs[0].shape[0]))
head_diagonal_blocks.defvjp(lambda ctx, g: head_blockdiag(g))


# ---- gathers and segment reductions --------------------------------------------------------------

@defop("gnn_gather_target", kind="view", attrs=("pattern",))
def gather_target(x, pattern):
    """x[i] for every entry (i, j): node data (R, ...) -> per-entry (nnz, ...)."""
    return np.repeat(x, pattern.degree, axis=0)


@defop("gnn_gather_source", kind="view", attrs=("pattern",))
def gather_source(x, pattern):
    """x[j] for every entry (i, j): node data (K, ...) -> per-entry (nnz, ...)."""
    return x[pattern.indices]


@defop("gnn_segment_sum", kind="reduce", attrs=("pattern",))
def segment_sum(x, pattern):
    """sum over the entries of each row: per-entry (nnz, ...) -> (R, ...), zeros for empty rows."""
    if kernels.available("segment_sum") and x.dtype in (np.float32, np.float64):
        return kernels.segment_sum(x, pattern.row, pattern.shape[0])
    return graph_kernels.row_reduce(np.add, x, pattern.indptr)


gather_target.defvjp(lambda ctx, g: segment_sum(g, ctx.attrs["pattern"]))
segment_sum.defvjp(lambda ctx, g: gather_target(g, ctx.attrs["pattern"]))


@defop("gnn_scatter_source", kind="reduce", attrs=("pattern",))
def scatter_source(x, pattern):
    """sum over the entries of each column: per-entry (nnz, ...) -> (K, ...) (the adjoint of gather_source)."""
    if kernels.available("segment_sum") and x.dtype in (np.float32, np.float64):
        return kernels.segment_sum(x, pattern.indices, pattern.shape[1])
    out = np.zeros((pattern.shape[1],) + x.shape[1:], dtype=x.dtype)
    np.add.at(out, pattern.indices, x)  # numpy fallback only
    return out


gather_source.defvjp(lambda ctx, g: scatter_source(g, ctx.attrs["pattern"]))
scatter_source.defvjp(lambda ctx, g: gather_source(g, ctx.attrs["pattern"]))


@defop("gnn_segment_max", kind="reduce", attrs=("pattern",))
def segment_max(x, pattern):
    """max over the entries of each row (elementwise on trailing axes); empty rows are 0 (as PyG)."""
    if kernels.available("segment_max") and x.dtype in (np.float32, np.float64):
        return kernels.segment_max(x, pattern.row, pattern.shape[0], 0.0)
    return graph_kernels.row_reduce(np.maximum, x, pattern.indptr, fill=0.0)


@segment_max.defvjp
def _(ctx, g):
    """The gradient goes to the entries equal to their row's maximum, shared equally among ties."""
    x, pattern = ctx.inputs[0], ctx.attrs["pattern"]
    hit = F.cast(F.equal(x, gather_target(ctx.out, pattern)), x.dtype)
    count = segment_sum(hit, pattern)
    share = F.div(g, F.maximum(count, 1.0))
    return F.mul(hit, gather_target(share, pattern))


def segment_mean(x, pattern):
    """mean over the entries of each row; empty rows are 0."""
    degree = np.maximum(pattern.degree, 1).astype(x.dtype)
    return F.div(segment_sum(x, pattern), degree.reshape((-1,) + (1,) * (x.ndim - 1)))
