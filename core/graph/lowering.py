"""numpy kernels that write into a preallocated output (`out=`), one way to compute an op.

The executor asks `out_kernel(node, inputs, out)` for a zero-argument callable that computes the
node's value into `out`. Each entry computes exactly what the primitive's numpy `impl` computes
(the same numpy function, only told where to write), so graphs give eager's numbers; the tests
check every entry against its primitive's impl. A node with no entry runs its impl and copies the
result into `out` (one temporary per run). Each entry is registered on its Primitive
(`Primitive.lowering`), the op's one home.
"""
from functools import partial

import numpy as np

from ..ops.primitive import register_rule
from ..ops.half_dispatch import has_half, widened_impl


def _ufunc(ufunc):
    def build(node, ins, out):
        if out.dtype != np.bool_ and any(isinstance(i, np.ndarray) and i.dtype != out.dtype for i in ins):
            return None  # mixed dtypes: the impl applies the type promotion (and integer division) rules
        return partial(ufunc, *ins, out)  # out positional: no kwargs dict per call
    return build


def _keyword_out(ufunc):
    return lambda node, ins, out: partial(ufunc, *ins, out=out)  # positional out is deprecated for these


def _float_divide(node, ins, out):
    if out.dtype.kind != "f":
        return None  # integer division truncates in the impl
    return _ufunc(np.true_divide)(node, ins, out)


def _sequence(*steps):
    def run():
        for step in steps:
            step()
    return run


@register_rule("lowering", "rsqrt")
def _rsqrt(node, ins, out):
    return _sequence(partial(np.sqrt, ins[0], out), partial(np.divide, 1.0, out, out))


@register_rule("lowering", "cast")
def _cast(node, ins, out):
    return partial(np.copyto, out, ins[0], casting="unsafe")


@register_rule("lowering", "where")
def _where(node, ins, out):
    condition, x, y = ins
    return _sequence(partial(np.copyto, out, y, casting="unsafe"),
                     partial(np.copyto, out, x, casting="unsafe", where=condition))


def _axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def _reduction(fn):
    def build(node, ins, out):
        return partial(fn, ins[0], axis=_axis(node.attrs.get("axis")), keepdims=node.attrs.get("keepdims", False),
                       out=out)
    return build


@register_rule("lowering", "mean")
def _mean(node, ins, out):
    """np.mean on a float32/float64 array is add.reduce, then a true_divide by the count as an intp
    (what numpy's _mean does), here without its Python wrapper."""
    x = ins[0]
    if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64):
        return _reduction(np.mean)(node, ins, out)
    axis = _axis(node.attrs.get("axis"))
    axes = range(x.ndim) if axis is None else ([axis] if np.isscalar(axis) else axis)
    count = np.intp(np.prod([x.shape[a] for a in axes], dtype=np.intp))
    return _sequence(partial(np.add.reduce, x, axis, None, out, node.attrs.get("keepdims", False)),
                     partial(np.true_divide, out, count, out))


def _ufunc_reduction(ufunc):
    """np.sum/np.max/... on an ndarray are exactly ufunc.reduce, minus a Python wrapper per call."""
    def build(node, ins, out):
        if not isinstance(ins[0], np.ndarray):
            return None
        return partial(ufunc.reduce, ins[0], _axis(node.attrs.get("axis")), None, out,
                       node.attrs.get("keepdims", False))
    return build


@register_rule("lowering", "sum_to")
def _sum_to(node, ins, out):
    x, shape = ins[0], tuple(node.attrs["shape"])
    lead = np.ndim(x) - len(shape)
    xs = np.shape(x)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and xs[i + lead] != 1)
    if not axes:
        return partial(np.copyto, out, np.reshape(x, shape))
    kept = tuple(1 if i in axes else n for i, n in enumerate(xs))
    return partial(np.add.reduce, x, axes, None, out.reshape(kept), True)


@register_rule("lowering", "relu")
def _relu(node, ins, out):
    return partial(np.maximum, ins[0], 0, out=out)


def _zeroed(scatter):
    """A scatter-add into zeros: clear `out`, then add into it (what np.zeros + the scatter does)."""
    def build(node, ins, out):
        add = scatter(node, ins, out)
        if add is None:
            return None
        return _sequence(partial(out.fill, 0), add)
    return build


def _take_mode(node):
    """np.take's mode: 'raise' buffers its output (a temporary per run); an index fixed at trace time
    was already checked by the eager run, so 'wrap' (the same for every in-range index) is safe."""
    return "wrap" if node.inputs[1].op == "const" else "raise"


@register_rule("lowering", "gather")
def _gather(node, ins, out):
    """The C kernel the step loop calls directly (mstrain.kernels.gather; its index range is checked
    by the executor, mstrain.graph.index_guard), else np.take."""
    x, indices = ins
    if not isinstance(x, np.ndarray) or not isinstance(indices, np.ndarray) or indices.dtype.kind not in "iu":
        return None
    from ..kernels.gather import take_step_kernel
    native = take_step_kernel(x, indices, node.attrs.get("axis", 0), out)
    if native is not None:
        return native
    return partial(np.take, x, indices, node.attrs.get("axis", 0), out, _take_mode(node))


@register_rule("lowering", "unsorted_segment_sum")
@_zeroed
def _segment_sum(node, ins, out):
    x, ids = ins
    if not isinstance(x, np.ndarray) or not isinstance(ids, np.ndarray):
        return None
    from ..ops.indexing import _check_segments, scatter_segment_rows
    flat = ids.reshape(-1)
    rows = x.reshape((flat.size,) + x.shape[ids.ndim:])
    num_segments = node.attrs["num_segments"]
    add = partial(scatter_segment_rows, out, flat, rows)
    if node.inputs[1].op == "const":  # checked by the eager run at trace time
        return add
    return _sequence(partial(_check_segments, flat, num_segments), add)


@register_rule("lowering", "gather_backward")
def _gather_backward(node, ins, out):
    """The C scatter-add the step loop calls directly (any axis), else the row scatter into zeros."""
    g, indices = ins
    if len(out.shape) and isinstance(g, np.ndarray) and isinstance(indices, np.ndarray):
        from ..kernels.gather import scatter_add_step_kernel
        native = scatter_add_step_kernel(g, indices, node.attrs.get("axis", 0), out)
        if native is not None:
            return native
    return _scatter_rows(node, ins, out)


@_zeroed
def _scatter_rows(node, ins, out):
    g, indices = ins
    if len(out.shape) == 0 or node.attrs.get("axis", 0) % out.ndim != 0 or not isinstance(g, np.ndarray):
        return None
    from ..ops._scatter import scatter_add_rows
    return partial(scatter_add_rows, out, indices, g)


_UFUNC_OUT = (  # ufuncs that take `out` positionally
    ("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("pow", np.power),
    ("neg", np.negative), ("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("abs", np.absolute),
    ("square", np.square), ("sin", np.sin), ("cos", np.cos), ("floor", np.floor), ("sign", np.sign),
    ("tanh", np.tanh), ("less", np.less), ("less_equal", np.less_equal), ("greater", np.greater),
    ("greater_equal", np.greater_equal), ("equal", np.equal), ("not_equal", np.not_equal),
    ("logical_and", np.logical_and), ("logical_or", np.logical_or), ("logical_not", np.logical_not),
    ("isfinite", np.isfinite), ("floor_div", np.floor_divide), ("mod", np.mod),
)
for _name, _function in _UFUNC_OUT:
    register_rule("lowering", _name)(_ufunc(_function))
register_rule("lowering", "matmul")(lambda node, ins, out: None if out.dtype == np.float16  # float32 BLAS:
                                    else _matmul_into(node, ins, out))                 # mstrain.graph.half


def _matmul_into(node, ins, out):
    """np.matmul into `out`, or eager's kernel for a product with a short side (thin_gemm)."""
    from ..kernels import thin_gemm
    a, b = ins
    if all(isinstance(x, np.ndarray) and x.dtype == out.dtype for x in ins):
        params = thin_gemm.product_params(a, b, out)
        if params is not None:
            return partial(thin_gemm.matmul_into, a, b, out, params)
    return _ufunc(np.matmul)(node, ins, out)
register_rule("lowering", "maximum")(_keyword_out(np.maximum))
register_rule("lowering", "minimum")(_keyword_out(np.minimum))
register_rule("lowering", "sum")(_ufunc_reduction(np.add))
register_rule("lowering", "max")(_ufunc_reduction(np.maximum))
register_rule("lowering", "min")(_ufunc_reduction(np.minimum))
register_rule("lowering", "prod")(_ufunc_reduction(np.multiply))
register_rule("lowering", "div")(_float_divide)


@register_rule("lowering", "bernoulli_mask")
def _bernoulli_mask_into(node, ins, out):
    """Eager's stream, drawn in C straight into the buffer (mstrain.graph.dropout); None: the impl."""
    from .dropout import mask_kernel
    return mask_kernel(node, out)


def out_kernel(node, ins, out):
    """A callable computing `node` into `out` with no allocation, or None when there is no entry.
    For a node with several outputs `out` is their list (None for an unused one); an op writing
    state in place does that write too."""
    build = node.prim.lowering
    if build is None or (node.prim.widens_half and has_half(ins)):  # float16: as eager, in float32
        return None
    return build(node, ins, out)


def impl_kernel(node, ins, outs):
    """Run the primitive's impl and copy its result(s) into `outs` (None entries are not kept)."""
    impl, attrs = widened_impl(node.prim, ins), node.attrs
    if not outs:  # an in-place update whose result is its own state
        return partial(impl, *ins, **attrs)
    if len(outs) == 1 and node.shape is not None:
        out = outs[0]
        if out is None:
            return partial(impl, *ins, **attrs)
        return lambda: np.copyto(out, impl(*ins, **attrs), casting="unsafe")

    def run():
        results = impl(*ins, **attrs)
        for o, r in zip(outs, results):
            if o is not None:
                np.copyto(o, r, casting="unsafe")
    return run
