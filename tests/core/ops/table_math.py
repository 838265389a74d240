"""Op-table rows for the elementwise math, reductions and shape ops (core/ops/{math,reduce,array}.py)."""
import numpy as np

from mstrain.ops import array as array_ops
from mstrain.ops import functional as F
from mstrain.ops.padding import pad_backward

from .cases import away, case, const, integers, normal, positive


def _sum_to_ref(x, shape):
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and x.shape[i + lead] != 1)
    return np.sum(x, axis=axes, keepdims=True).reshape(shape)


def _index_add_ref(g, shape, index):
    out = np.zeros(shape)
    np.add.at(out, index, g)
    return out


_REPEATED_ROWS = np.array([2, 0, 2, 3, 2])


def _reflect_pad_adjoint(g):
    """Sum of g over the output positions that copy each input position (REFLECT, (1, 1), (2, 1))."""
    rows = np.pad(np.arange(2), (1, 1), "reflect")
    cols = np.pad(np.arange(4), (2, 1), "reflect")
    out = np.zeros((2, 4))
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            out[r, c] += g[i, j]
    return out


def _scatter_nd_ref(u):
    out = np.zeros((3, 2, 2))
    for (a, b), row in zip([[0, 1], [2, 0], [0, 1]], u):
        out[a, b] += row
    return out

CASES = [
    # ---- binary arithmetic with broadcasting
    case("add", F.add, np.add, normal(3, 4), normal(4), second_order=True),
    case("sub", F.sub, np.subtract, normal(2, 1, 3), normal(4, 1)),
    case("mul", F.mul, np.multiply, normal(2, 3, 1), normal(3, 5), second_order=True),
    case("div", F.div, np.divide, normal(3, 4), away(3, 1, margin=0.5), second_order=True),
    case("pow", F.pow, np.power, positive(3, 4), normal(3, 4), second_order=True),
    case("pow", lambda x: x ** 3, lambda x: x ** 3, normal(5), name="pow_int_exponent", second_order=True),
    case("maximum", F.maximum, np.maximum, normal(3, 4), normal(4)),
    case("minimum", F.minimum, np.minimum, normal(3, 4), normal(3, 1)),
    case("where", F.where, np.where, lambda rng: rng.random((3, 4)) > 0.5, normal(3, 4), normal(4)),
    # ---- unary
    case("identity", F.identity, lambda x: x, normal(3, 2)),
    case("neg", F.neg, np.negative, normal(7)),
    case("exp", F.exp, np.exp, normal(3, 5), second_order=True),
    case("log", F.log, np.log, positive(3, 5), second_order=True),
    case("sqrt", F.sqrt, np.sqrt, positive(4, 3), second_order=True),
    case("rsqrt", F.rsqrt, lambda x: 1 / np.sqrt(x), positive(4, 3), second_order=True),
    case("abs", F.abs, np.abs, away(5, 3)),
    case("square", F.square, np.square, normal(5, 3), second_order=True),
    case("sin", F.sin, np.sin, normal(5), second_order=True),
    case("cos", F.cos, np.cos, normal(5), second_order=True),
    case("cast", lambda x: F.cast(x, np.float64), lambda x: x, normal(3, 3)),
    # ---- matrix products
    case("matmul", F.matmul, np.matmul, normal(3, 4), normal(4, 5), second_order=True),
    case("matmul", F.matmul, np.matmul, normal(2, 3, 4), normal(4, 5), name="matmul_batch_broadcast"),
    case("matmul", F.matmul, np.matmul, normal(4), normal(4, 3), name="matmul_vector"),
    case("swapaxes", lambda x: F.swapaxes(x, 0, 2), lambda x: np.swapaxes(x, 0, 2), normal(2, 3, 4)),
    # ---- shape plumbing
    case("broadcast_to", lambda x: F.broadcast_to(x, (2, 3, 4)), lambda x: np.broadcast_to(x, (2, 3, 4)),
         normal(3, 1)),
    case("sum_to", lambda x: F.sum_to(x, (3, 1)), lambda x: _sum_to_ref(x, (3, 1)), normal(2, 3, 4)),
    case("reshape_to", lambda x: F.reshape(x, (4, -1)), lambda x: x.reshape(4, -1), normal(2, 3, 4)),
    case("transpose", lambda x: F.transpose(x, (1, 2, 0)), lambda x: x.transpose(1, 2, 0), normal(2, 3, 4)),
    case("concat", lambda a, b: F.concat([a, b], 1), lambda a, b: np.concatenate([a, b], 1),
         normal(2, 3), normal(2, 5)),
    case("split", lambda x: F.split(x, [1, 3], 1), lambda x: tuple(np.split(x, [1], 1)), normal(2, 4)),
    case("tile", lambda x: F.tile(x, (2, 1, 3)), lambda x: np.tile(x, (2, 1, 3)), normal(3, 2)),
    case("getitem", lambda x: x[1:, ::2], lambda x: x[1:, ::2], normal(4, 5)),
    case(("getitem", "index_add_zeros"), lambda x: x[_REPEATED_ROWS], lambda x: x[_REPEATED_ROWS],
         normal(4, 3), name="getitem_repeated_rows"),
    case(("getitem", "index_add_zeros"), lambda x: x[:, _REPEATED_ROWS - 1], lambda x: x[:, _REPEATED_ROWS - 1],
         normal(2, 4), name="getitem_repeated_columns"),
    case("index_add_zeros", lambda g: array_ops.scatter_into_zeros(g, (4, 3), (_REPEATED_ROWS,)),
         lambda g: _index_add_ref(g, (4, 3), (_REPEATED_ROWS,)), normal(5, 3), second_order=True),
    # ---- reductions
    case("sum", lambda x: F.sum(x, 1), lambda x: x.sum(1), normal(3, 4, 2)),
    case("sum", lambda x: F.sum(x, (0, 2), True), lambda x: x.sum((0, 2), keepdims=True), normal(3, 4, 2),
         name="sum_keepdims"),
    case("mean", lambda x: F.mean(x, -1), lambda x: x.mean(-1), normal(3, 5), second_order=True),
    case("max", lambda x: F.max(x, 0), lambda x: x.max(0), normal(5, 3)),
    case("min", lambda x: F.min(x), lambda x: x.min(), normal(5, 3)),
    case("prod", lambda x: F.prod(x, 1), lambda x: x.prod(1), away(3, 4), second_order=True),
    case(("max", "log", "exp", "sum"), lambda x: F.logsumexp(x, 1),
         lambda x: np.log(np.exp(x).sum(1)), normal(3, 5), name="logsumexp", second_order=True),
    case("mul", lambda x, k: x * k, lambda x, k: x * k, normal(3), const(2.5), name="mul_python_scalar"),
    case("sum", lambda x, i: F.sum(x[i]), lambda x, i: x[i].sum(), normal(6), integers(6, 4),
         name="sum_of_gather_int_index"),
]


def _var_ref(x, axis, ddof):
    return x.var(axis=axis, ddof=ddof)


CASES += [
    case("log1p", F.log1p, np.log1p, positive(3, 4, low=-0.5, high=2.0), second_order=True),
    case("expm1", F.expm1, np.expm1, normal(3, 4), second_order=True),
    case("reciprocal", F.reciprocal, np.reciprocal, away(3, 4, margin=0.5), second_order=True),
    case("l2_norm", F.norm, lambda x: np.sqrt((x * x).sum()), normal(3, 4), second_order=True),
    case("l2_norm", lambda x: F.norm(x, axis=1, keepdims=True), lambda x: np.linalg.norm(x, axis=1, keepdims=True),
         normal(3, 4), name="l2_norm_axis"),
    case("abs", lambda x: F.norm(x, 1, 0), lambda x: np.abs(x).sum(0), away(3, 4), name="norm_l1"),
    case("pow", lambda x: F.norm(x, 3), lambda x: (np.abs(x) ** 3).sum() ** (1 / 3), away(5), name="norm_p3"),
    case("max", lambda x: F.norm(x, np.inf, 1), lambda x: np.abs(x).max(1), away(3, 4), name="norm_inf"),
    case("sum_of_squares", lambda a, b: F.global_norm([a, b]), lambda a, b: np.sqrt((a * a).sum() + (b * b).sum()),
         normal(3, 2), normal(4), second_order=True),
    case("sum_of_squares", lambda a, b: F.clip_by_global_norm((a, b), 0.5),
         lambda a, b: tuple(t * 0.5 / np.sqrt((a * a).sum() + (b * b).sum()) for t in (a, b)),
         normal(3, 2), normal(4), name="clip_by_global_norm"),
    case("mean", lambda x: F.var(x, 1, ddof=1), lambda x: _var_ref(x, 1, 1), normal(3, 5), name="var",
         second_order=True),
    case("sqrt", lambda x: F.std(x), lambda x: x.std(), normal(4, 3), name="std"),
    case("einsum", lambda a, b: F.einsum("bij,bjk->bik", a, b), lambda a, b: np.einsum("bij,bjk->bik", a, b),
         normal(2, 3, 4), normal(2, 4, 5), second_order=True),
    case("einsum", lambda a, b, c: F.einsum("ij,j,jk->ik", a, b, c), lambda a, b, c: np.einsum("ij,j,jk->ik", a, b, c),
         normal(3, 4), normal(4), normal(4, 2), name="einsum_three"),
    case("einsum", lambda a, b: F.einsum("ij,kl->i", a, b), lambda a, b: np.einsum("ij,kl->i", a, b),
         normal(3, 4), normal(2, 2), name="einsum_summed_letters"),
    case("mul", F.outer, np.outer, normal(3), normal(4), name="outer"),
    # ---- padding (MindSpore's CONSTANT / REFLECT / SYMMETRIC) and its adjoint
    case("pad", lambda x: F.pad(x, ((1, 2), (0, 1))), lambda x: np.pad(x, ((1, 2), (0, 1))), normal(2, 3),
         second_order=True),
    case("pad", lambda x: F.pad(x, ((1, 2), (2, 1)), "REFLECT"), lambda x: np.pad(x, ((1, 2), (2, 1)), "reflect"),
         normal(3, 4), name="pad_reflect"),
    case("pad", lambda x: F.pad(x, ((0, 0), (3, 2)), "SYMMETRIC"),
         lambda x: np.pad(x, ((0, 0), (3, 2)), "symmetric"), normal(2, 3), name="pad_symmetric", second_order=True),
    case("pad_backward", lambda g: pad_backward(g, ((1, 1), (2, 1)), "REFLECT"), _reflect_pad_adjoint,
         normal(4, 7), name="pad_backward"),
    case("sum", lambda x: F.l2_loss(x), lambda x: (x * x).sum() / 2, normal(3, 4), name="l2_loss"),
    case("index_add", lambda u: F.scatter_nd(np.array([[0, 1], [2, 0], [0, 1]]), u, (3, 2, 2)),
         _scatter_nd_ref, normal(3, 2), name="scatter_nd"),
]
