"""Eager float16 elementwise ops computed in float32 and rounded once.

numpy computes a float16 ufunc element by element through float conversions in scalar loops
(exp, expm1, tanh: 10-30x slower than float32's vector loops), and a primitive whose impl chains
several ufuncs rounds after each. An elementwise primitive given a float16 array is therefore run
on float32 copies of its float16 inputs and its result rounded to the dtype numpy would have given
(float16 unless another input promotes it): one rounding per primitive, as the fused kernels of a
compiled graph compute it (in float, rounded as each member stores), and the same values as
numpy's own float16 loop for a single-ufunc op (numpy also computes those in float and rounds).
Python numbers meeting a float16 array are numpy's weak scalars: rounded to float16 first, as
numpy does, then used in float32.

Until a float16 array exists in the process, eager dispatch looks for none: each primitive's
`half_check` is 0, or 2 on ops with a dtype attribute (a cast, a fill), whose float16 result turns
the inputs test on for every elementwise primitive (`enable`), as a float16 Tensor built from
data does. A float32-only run pays one integer test per op.
"""
import numpy as np

from ..kernels.half import astype

_HALF = np.dtype(np.float16)
_WIDE = np.dtype(np.float32)
_result_dtypes = {}  # (primitive, input dtypes, dtype attr) -> the dtypes numpy's impl returns


class _State:
    enabled = False


def initial_check(prim):
    """A new primitive's `half_check` (see the module docstring)."""
    if _State.enabled:
        return 1 if prim.widens_half else 0
    return 2 if "dtype" in prim.attr_names else 0


def enable():
    """Float16 is in use: every elementwise primitive looks for float16 inputs from now on."""
    if _State.enabled:
        return
    _State.enabled = True
    from .primitive import REGISTRY
    for prim in REGISTRY.values():
        prim.half_check = initial_check(prim)


def note_result(out):
    """After an op with a dtype attribute: a float16 result enables the float16 rule."""
    results = out if isinstance(out, tuple) else (out,)
    if any(type(o) is np.ndarray and o.dtype is _HALF for o in results):
        enable()


def has_half(args):
    """Whether any of `args` (an eager op's numpy inputs) is a float16 array."""
    for a in args:
        if type(a) is np.ndarray and a.dtype is _HALF:
            return True
    return False


def _signature(prim, args, attrs):
    kinds = tuple(a.dtype.char if isinstance(a, (np.ndarray, np.generic)) else type(a) for a in args)
    dtype = attrs.get("dtype")
    try:
        hash(dtype)  # a numpy dtype, a scalar type, mstrain's names: the key itself (repr takes 5 us)
    except TypeError:
        dtype = repr(dtype)
    return prim, kinds, dtype


def _result_dtypes_of(prim, args, attrs):
    """The output dtypes of `prim`'s own impl on inputs like `args` (probed once per signature on
    one-element arrays), or None when the probe fails (the op then runs as numpy runs it)."""
    key = _signature(prim, args, attrs)
    if key not in _result_dtypes:
        probes = [np.zeros((1,) * a.ndim, a.dtype) if isinstance(a, np.ndarray) else a for a in args]
        try:
            with np.errstate(all="ignore"):
                out = prim.impl(*probes, **attrs)
            outs = (out,) if prim.num_outputs == 1 else tuple(out)
            _result_dtypes[key] = tuple(np.asarray(o).dtype for o in outs)
        except Exception:  # noqa: BLE001  (an op whose impl needs real shapes: no widening)
            _result_dtypes[key] = None
    return _result_dtypes[key]


def _widened(a, weak_to_half):
    if type(a) is np.ndarray and a.dtype is _HALF:
        return astype(a, _WIDE)
    if weak_to_half and isinstance(a, (float, int)) and not isinstance(a, bool):
        with np.errstate(over="ignore"):
            return float(np.float16(a))  # numpy rounds a weak scalar to the array's float16
    return a


def _narrowed(out, dtype):
    return astype(out, dtype) if isinstance(out, (np.ndarray, np.generic)) and out.dtype != dtype else out


def run_in_float32(prim, args, attrs):
    """`prim`'s result on `args` (some float16) computed in float32 and rounded once."""
    dtypes = _result_dtypes_of(prim, args, attrs)
    if dtypes is None:
        return prim.impl(*args, **attrs)
    wide = [_widened(a, dtypes[0] == _HALF) for a in args]
    out = prim.impl(*wide, **attrs)
    with np.errstate(over="ignore"):  # float16's range ends at 65504: inf, as numpy's loop gives it
        if prim.num_outputs == 1:
            return _narrowed(out, dtypes[0])
        return tuple(_narrowed(o, d) for o, d in zip(out, dtypes))


def run(prim, args, attrs):
    """An eager op whose `half_check` is set: in float32 when a float16 array is among `args`;
    a float16 result of an op with a dtype attribute enables the rule."""
    if prim.half_check & 1 and has_half(args):
        return run_in_float32(prim, args, attrs)
    out = prim.impl(*args, **attrs)
    if prim.half_check & 2:
        note_result(out)
    return out


def widened_impl(prim, ins):
    """The impl a compiled graph's numpy kernel runs for `prim` on `ins`: the float32 one above when
    a float16 array is among them (the unfused graph then computes as eager), else `prim.impl`."""
    if not getattr(prim, "widens_half", False) or not has_half(ins):
        return prim.impl
    return lambda *args, **attrs: run_in_float32(prim, args, attrs)


__all__ = ["enable", "has_half", "initial_check", "note_result", "run", "run_in_float32", "widened_impl"]
