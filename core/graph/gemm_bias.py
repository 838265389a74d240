"""A dense layer's bias add inside its product: C = A B + bias in one pass over C.

`fuse_gemm_epilogues` (epilogue.py) merges a product with the elementwise kernel that reads it. When
that kernel adds a row vector to the product first (a dense layer's bias, `fused(matmul, add, ...)`),
`split_bias` takes the add out of the kernel and `bias_product` gives the product a form that writes
A B + bias itself: a plain dense layer then has no second pass over its output at all, and one with
an activation runs only the activation in place after it. The values are the two passes' bits:

- the packed GEMM (mstrain.kernels.gemm_panel) adds the bias to each tile's finished sums at their
  store: the same one float add as the separate kernel's;
- numpy's BLAS (`ms_gemm_bias`): every row of C starts as the bias and gemm runs with beta 1. BLAS
  adds its sums into C once per depth block of K, so C is sum + bias (the two-pass bits) only while K
  fits one block: `blas_bias_depth` finds the largest depth of a ladder at which both forms agree bit
  for bit (OpenBLAS's K block on this CPU, e.g. 384 for float32 on SkylakeX) once per process, and
  deeper products keep the two passes;
The kernel after the product computes the same functions of the same values. Its loops may differ
from the whole kernel's (no broadcast operand left to keep rows apart), and where an activation calls a
vectorised math function (erf) the compiler's split of a short row into vector and scalar code may
then differ in the last place for a few elements (rows of a multiple of 16 values, as in W1 and W7,
are all vector code either way).

- the short-side kernel (thin_gemm), the few-rows layout (gemm_layout), float16 products, batched
  products, and a bias that is not one contiguous row of the output's width keep the two passes.
"""
import numpy as np

from . import native
from .group import FusedGroup

# depths tried by blas_bias_depth, deepest first; the largest one at which the forms agree is the limit
_DEPTH_LADDER = (512, 448, 384, 320, 256, 192, 128, 64)
_PROBE_ROWS, _PROBE_COLS = 256, 64   # large enough for BLAS's blocked path (not its small-matrix kernels)
_SMALL_PROBE = (24, 40, 48)          # ... and a product small enough for them
_depths = {}


def blas_bias_depth(dtype):
    """The deepest K (0: none) at which ms_gemm_bias gives the product-then-add bits for `dtype`
    (float32 or float64), found once by running both forms on random operands."""
    dtype = np.dtype(dtype)
    if dtype not in _depths:
        _depths[dtype] = _probe_depth(dtype)
    return _depths[dtype]


def _entries():
    if native.runtime() is None or native._Runtime.gemm_bias is None:
        return None
    return native._Runtime.gemm, native._Runtime.gemm_bias


def _call(entry, arrays, params):
    native.call_c(entry, [a.ctypes.data for a in arrays], params)


def _forms_agree(entries, dtype, m, n, k, seed):
    """Whether x @ w.T then + bias and the bias-prefilled beta-1 call give the same bits."""
    from ..kernels.blas_params import gemm_params
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((n, k)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    two_pass, one_pass = np.empty((m, n), dtype), np.empty((m, n), dtype)
    params = gemm_params(x, w.T, two_pass)
    _call(entries[0], [x, w.T, two_pass], params)
    two_pass += bias
    _call(entries[1], [x, w.T, one_pass, bias], params)
    return np.array_equal(two_pass, one_pass)


def _probe_depth(dtype):
    entries = _entries()
    if entries is None or not _forms_agree(entries, dtype, *_SMALL_PROBE, seed=0):
        return 0
    for depth in _DEPTH_LADDER:
        if _forms_agree(entries, dtype, _PROBE_ROWS, _PROBE_COLS, depth, seed=depth):
            return depth
    return 0


class BiasProduct:
    """out = a @ b + bias through a C entry taking ({a, b, out, bias}, numpy's gemm params): run from
    Python or, through `native`, from the C step loop (the same call)."""

    def __init__(self, entry, arrays, params, panel=None):
        self.arrays, self.params = list(arrays), list(params)
        self._step = native.c_step(native.KERNEL(int(entry)), [a.ctypes.data for a in self.arrays], self.params)
        self.native = ("kernel", *self._step)
        self.panel = panel  # the PanelProduct this one adds a bias to, if any

    def __call__(self):
        native.run_c_step(self._step)


def bias_product(product, bias, out):
    """A BiasProduct computing `product` (a built product kernel writing `out`) plus `bias`, or None
    where that would change a bit or there is no such entry (see the module docstring)."""
    if bias.dtype != out.dtype or bias.ndim != 1 or bias.shape[0] != out.shape[-1] \
            or not bias.flags.c_contiguous:
        return None
    from ..kernels import gemm_panel
    if isinstance(product, gemm_panel.PanelProduct):
        entry = gemm_panel.bias_c_entry()
        a, b, panel_out = product.operands
        if entry is None or panel_out is not out:
            return None
        return BiasProduct(entry, [a, b, out, bias], product.params, panel=product)
    described = getattr(product, "native", None)
    if described is None or described[0] != "gemm":
        return None
    (a, b, product_out), params = described[1], described[2]
    entries = _entries()
    if entries is None or product_out is not out or params[9] * params[10] != 1 \
            or params[5] > blas_bias_depth(out.dtype):
        return None
    return BiasProduct(entries[1], [a, b, out, bias], params)


def split_bias(group, product_slot, out_slot):
    """(add member, bias node, the group without the add or None when nothing is left) when `group`'s
    only reader of its input `product_slot` adds it to a row vector of the output's width in the
    output's dtype; else None. The add's value stays where the product is written (`out_slot`)."""
    product = group.pointer_inputs[product_slot]
    readers = [m for m in group.members if any(i is product for i in m.inputs)]
    if len(readers) != 1 or readers[0].prim.name != "add" or len(readers[0].inputs) != 2:
        return None
    add = readers[0]
    bias = add.inputs[1] if add.inputs[0] is product else add.inputs[0]
    if bias is product or group.is_member(bias) or bias.shape is None:
        return None
    width = group.shape[-1]
    if width < 2 or not bias.shape or tuple(bias.shape) != (1,) * (len(bias.shape) - 1) + (width,):
        return None
    if not (bias.dtype == add.dtype == product.dtype):
        return None
    slots = [k for k, o in enumerate(group.outputs) if o is add]
    if slots and slots != [out_slot]:
        return None
    members = [m for m in group.members if m is not add]
    outputs = [o for o in group.outputs if o is not add]
    if not (members and outputs):
        return add, bias, None
    return add, bias, FusedGroup(group.name, members, outputs, group.shape, False, "elementwise")


__all__ = ["blas_bias_depth", "bias_product", "split_bias", "BiasProduct"]
