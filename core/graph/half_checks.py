"""The loss-scaled step's overflow check of a float16 product's result, done as the product rounds it.

A loss-scaled step asks of each gradient g whether it holds an inf or nan:
`isfinite(sum(sum(g * inv_scale * 0, -1)))` (mstrain.nn.wrap._any_overflow; at O2 g is float16,
widened and unscaled first). For a large weight gradient that is one more pass over g after the
float16 product wrote it (W6's 784 x 128 gradient: 16-17 us a step). The product rounds its float32
result to float16 anyway, one chunk at a time in cache, so `fold_overflow_checks` has it check each
chunk's values as it stores them: the product becomes `half_product_checked`, whose second output
is 0 when every value is finite and nan otherwise, and the check reads that flag instead.

The flag decides as the sum did: with s = inv_scale, sum(g * s * 0) is nan exactly when some g is
inf or nan (g * s * 0 is then nan, as s > 0) or s itself is inf or nan (0 * inf is nan), and 0
otherwise; `flag + s * 0` is non-finite in exactly the same cases.
"""
import numpy as np

from ..ops import primitive
from .expand import Builder
from . import native
from .half import cast_source, converters
from .half_shadow import is_half_exact
from .ir import Node, rewrite

_PRODUCTS = ("matmul", "dense_weight_grad")
_CHECK_MIN_SIZE = 1024  # from a layer of 10 x 128 on (W6: its check, a kernel of its own, took 0.5 us)


@primitive.defop("half_product_checked", differentiable=False, num_outputs=2, attrs=("product",))
def half_product_checked(a, b, product):
    """(the float16 `product` of a and b, a float32 0-d flag: 0 if all its values are finite, else nan).
    A float32 operand is read rounded to float16, as the float16 products of a compiled step read them."""
    a, b = (x if x.dtype == np.float16 else x.astype(np.float16) for x in (np.asarray(a), np.asarray(b)))
    value = primitive.get(product).impl(a, b)
    return value, np.array(0.0 if np.isfinite(value).all() else np.nan, np.float32)


@primitive.register_rule("host_kernel", "half_product_checked")
def _checked_kernel(node, ins, outs):
    """The product as a HalfGemm (mstrain.graph.half) that sets the flag while it rounds; None when
    HalfGemm does not take these arrays (the numpy impl runs then)."""
    from .half import half_gemm
    value = next((o for o in outs if o is not None and o.dtype == np.float16), None)
    flag = next((o for o in outs if o is not None and o.dtype == np.float32 and o.ndim == 0), None)
    if value is None or flag is None:
        return None
    a, b = ins
    if node.attrs["product"] == "dense_weight_grad":
        a = a.T
    return half_gemm(a, b, value, exact=[is_half_exact(i) for i in node.inputs], flag=flag)


@primitive.defop("half_sum_checked", differentiable=False, num_outputs=2)
def half_sum_checked(x):
    """(the float16 sum of x's rows (axis 0, rounded row after row, as numpy sums float16), a float32
    0-d flag: 0 if all its values are finite, else nan): a bias gradient and its overflow check. A
    float32 x is read rounded to float16."""
    value = np.sum(np.asarray(x).astype(np.float16, copy=False), axis=0)
    return value, np.array(0.0 if np.isfinite(value).all() else np.nan, np.float32)


@primitive.register_rule("host_kernel", "half_sum_checked")
def _sum_checked_kernel(node, ins, outs):
    """The sum in C (mstrain.graph.half's ms_half_sum_rows_checked) over a contiguous float16 matrix,
    else None (the numpy impl runs)."""
    x, (value, flag) = ins[0], outs
    functions = converters()
    if functions is None or x.dtype not in (np.float16, np.float32) or x.ndim != 2 or not x.flags.c_contiguous or \
            value.dtype != np.float16 or value.shape != x.shape[1:] or flag.dtype != np.float32 or flag.ndim != 0:
        return None

    def run():
        value[...], flag[...] = half_sum_checked(x)
    run.native = ("steps", [native.c_step(functions.half_sum_rows_checked,
                                          [x.ctypes.data, value.ctypes.data, flag.ctypes.data],
                                          [*x.shape, int(x.dtype == np.float32)])])
    return run


def _is_scalar_zero(node):
    value = node.value if node.op == "const" else None
    return value is not None and np.ndim(value) == 0 and float(value) == 0.0


def _scalar(node):
    return node.shape is not None and node.size == 1 and node.dtype == np.float32


def _summed_value(total):
    """(v, scale or None) when `total` sums cast(v, float32) (* scale, a float32 scalar) * 0 over all
    of v, else None."""
    node = total
    while node.op == "call" and node.prim.name == "sum" and not node.attrs.get("keepdims"):
        node = node.inputs[0]
    if node is total or node.op != "call" or node.prim.name != "mul" or not _is_scalar_zero(node.inputs[1]):
        return None
    widened, scale = node.inputs[0], None
    if widened.op == "call" and widened.prim.name == "mul" and _scalar(widened.inputs[1]):
        widened, scale = widened.inputs[0], widened.inputs[1]
    if widened.op != "call" or widened.prim.name != "cast" or widened.dtype != np.float32 or \
            widened.inputs[0].shape != widened.shape:
        return None
    return widened.inputs[0], scale


def _checkable(product):
    return product.op == "call" and product.prim.name in _PRODUCTS and product.dtype == np.float16 and \
        not product.attrs and product.size >= _CHECK_MIN_SIZE


def _checkable_sum(node):
    """A float16 sum of a matrix's rows (a bias gradient)."""
    return node.op == "call" and node.prim.name == "sum" and node.dtype == np.float16 and \
        node.inputs[0].dtype == np.float16 and node.inputs[0].shape is not None and \
        len(node.inputs[0].shape) == 2 and node.attrs.get("axis") in (0, (0,)) and not node.attrs.get("keepdims")


def _overflow_check(node):
    """The summed value and scale of `node` when it is the overflow check of one value, else None."""
    if node.op != "call" or node.prim.name != "isfinite" or node.inputs[0].shape != ():
        return None
    return _summed_value(node.inputs[0])


def fold_overflow_checks(graph):
    """Overflow checks of large float16 products' results read a flag the product sets while it
    rounds them (see the module docstring)."""
    products = set()
    for node in graph.nodes:
        found = _overflow_check(node)
        if found is not None and (_checkable(found[0]) or _checkable_sum(found[0])):
            products.add(id(found[0]))
    products -= {id(n) for n in graph.nodes if id(n) in products and any(id(i) in products for i in n.inputs)}
    if not products:
        return graph
    builder, prim = Builder(), primitive.get("half_product_checked")
    sum_prim, users = primitive.get("half_sum_checked"), graph.users()

    def rule(node):
        if id(node) in products:  # (their inputs are never replaced: no product reads a checked one here)
            call = Node("call", node.inputs, prim, {"product": node.prim.name}) if node.prim.name in _PRODUCTS \
                else Node("call", (cast_source(node.inputs[0], users),), sum_prim, {})
            return [call, Node("project", (call,), value=0, shape=node.shape, dtype=node.dtype)]
        found = _overflow_check(node)
        if found is None or found[0].op != "project" or found[0].inputs[0].op != "call" or \
                found[0].inputs[0].prim not in (prim, sum_prim):
            return None
        value, scale = found
        flag = Node("project", (value.inputs[0],), value=1, shape=(), dtype=np.dtype(np.float32))
        if scale is not None:
            flag = builder.call("add", flag, builder.call("mul", scale, 0.0))
        return builder.call("isfinite", flag)
    return rewrite(graph, rule)


__all__ = ["half_product_checked", "half_sum_checked", "fold_overflow_checks"]
