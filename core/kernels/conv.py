"""Convolution and pooling kernels on NCHW arrays: the gathers around the GEMMs of a convolution
(im2col and its adjoint col2im) and max / average pooling with their backward passes.

    im2col(x, kernel, stride, padding, dilation, out_hw)      (C*kh*kw, N*OH*OW) columns:
        cols[(c*kh + i)*kw + j, (n*OH + oh)*OW + ow] = x[n, c, oh*sh - top + i*dh, ow*sw - left + j*dw]
        (0 where that falls in the padding); a convolution is then W (O, C*kh*kw) @ cols
    col2im(cols, x_shape, kernel, stride, padding, dilation)  the adjoint: each entry added back where
                                                              im2col read it
    max_pool2d_forward(x, kernel, stride, padding)            maximum of each window (padding = -inf)
    max_pool2d_backward(x, grad, kernel, stride, padding)     grad added at each window's argmax of x
    max_pool2d_select(x, values, kernel, stride, padding)     values read at each window's argmax of x
    avg_pool2d_forward(x, kernel, stride, padding, count_include_pad)
    avg_pool2d_backward(grad, x_shape, kernel, stride, padding, count_include_pad)
    conv2d_forward(x, w, stride, padding, dilation, groups)   (N, O, OH, OW): w (O, C/groups, kh, kw) @ columns
    conv2d_backward_filter(x, grad, w_shape, stride, padding, dilation, groups)   the weight gradient
    conv2d_backward_input(grad, w, x_shape, stride, padding, dilation, groups)    the input gradient

The three convolution passes are GEMMs around im2col / col2im. The C++ kernels run them on chunks of
the batch whose columns fit in the cache, calling the cblas_?gemm numpy itself uses; the numpy
references make the columns of the whole batch and call np.matmul. In float32 with one group and at
least 32 products per output, the C++ kernels skip im2col: each sample is copied once into zero-padded
(for a stride, phase-split) planes and every window tap is a product with those planes read at an
offset, summed in registers (src/conv_direct.h; the input gradient so at stride 1 only).

The convolution and pooling functions take `out=` (a C-contiguous array of the result's shape and
dtype) to write the result into a buffer the caller planned. `kernel`, `stride`, `dilation` are
(h, w) pairs, `padding` is (top, bottom, left, right). The argmax of a window is its first maximum
in row-major order (a NaN wins), as numpy's argmax. Each function
runs the C++ kernel of `core/kernels/src/conv.cpp` (convolution) or `pool.cpp` when it is built,
not disabled by MSTRAIN_DISABLE_KERNELS and the dtype is float32 or float64, else the numpy reference
`reference_<name>` below; the tests compare the two.
"""
import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import ShapeError
from . import _native

__all__ = ["conv2d_forward", "conv2d_backward_filter", "conv2d_backward_input", "im2col", "col2im",
           "max_pool2d_forward", "max_pool2d_backward", "max_pool2d_select",
           "avg_pool2d_forward", "avg_pool2d_backward", "output_hw", "conv2d_c_call", "pool2d_c_call"]

_NATIVE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def output_hw(in_hw, kernel, stride, padding, dilation=(1, 1)):
    """(OH, OW) of a window sliding over `in_hw`; a ShapeError when no window fits."""
    oh = (in_hw[0] + padding[0] + padding[1] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (in_hw[1] + padding[2] + padding[3] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    if oh < 1 or ow < 1:
        raise ShapeError(f"conv/pool: a {kernel[0]}x{kernel[1]} window (dilation {tuple(dilation)}) does not fit "
                         f"the {in_hw[0]}x{in_hw[1]} input padded by {tuple(padding)}")
    return oh, ow


def _geometry(x_shape, out_hw, kernel, stride, padding, dilation=(1, 1)):
    n, c, h, w = x_shape
    return [int(v) for v in (n, c, h, w, out_hw[0], out_hw[1], kernel[0], kernel[1], stride[0], stride[1],
                             padding[0], padding[2], dilation[0], dilation[1])]


def _covered_hw(x_shape, kernel, stride, padding, dilation, out_hw, name):
    """`out_hw`, the leading windows only (a transposed convolution's input may cover fewer windows
    than fit), or all windows when None."""
    full = output_hw(x_shape[2:], kernel, stride, padding, dilation)
    if out_hw is None:
        return full
    out_hw = tuple(int(v) for v in out_hw)
    if not (1 <= out_hw[0] <= full[0] and 1 <= out_hw[1] <= full[1]):
        raise ShapeError(f"{name}: {out_hw[0]}x{out_hw[1]} windows asked of {tuple(x_shape)}, "
                         f"which has {full[0]}x{full[1]}")
    return out_hw


def _kernel_for(name, *arrays):
    if any(a.dtype not in _NATIVE_DTYPES or a.dtype != arrays[0].dtype for a in arrays):
        return None
    return _native(name)  # the callers pass contiguous copies


def _into(out, shape, dtype, name):
    """`out` checked to take the result (the kernels write into it), or a new array."""
    shape = tuple(int(v) for v in shape)
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
        got = f"{out.dtype}{out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise ShapeError(f"{name}: out must be a C-contiguous {np.dtype(dtype)} array of shape {shape}, got {got}")
    return out


def _reference_into(out, result):
    if out is None:
        return result
    np.copyto(out, result, casting="unsafe")
    return out


def _check_nchw(x, name):
    if x.ndim != 4:
        raise ShapeError(f"{name} must be (N, C, H, W), got shape {x.shape}")


_blas_state = {}  # "ready": numpy's cblas_?gemm handed to the extension, or False when not found


def _conv_kernel(name, *arrays):
    """The C++ convolution pass `name` once numpy's BLAS is handed over, or None."""
    native = _kernel_for(name, *arrays)
    if native is None:
        return None
    if "ready" not in _blas_state:
        from ..graph.native_blas import numpy_blas_gemm, numpy_blas_thread_addresses
        blas = numpy_blas_gemm()  # the cblas_?gemm numpy's matmul calls
        if blas is not None:
            # with the thread functions the C++ passes give each thread its own chunks and one BLAS thread
            _native("conv_set_blas")(blas[0], blas[1], bool(blas[2]), *(numpy_blas_thread_addresses() or (0, 0)))
        _blas_state["ready"] = blas is not None
    return native if _blas_state["ready"] else None


# ---- numpy references ---------------------------------------------------------------------------

def _padded(x, padding, value=0.0):
    top, bottom, left, right = padding
    if not (top or bottom or left or right):
        return x
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def _windows(xp, kernel, stride, dilation, out_hw):
    """(N, C, OH, OW, kh, kw) strided view of the padded input `xp` (no copy)."""
    n, c = xp.shape[:2]
    s = xp.strides
    return as_strided(xp, (n, c, out_hw[0], out_hw[1], kernel[0], kernel[1]),
                      (s[0], s[1], s[2] * stride[0], s[3] * stride[1], s[2] * dilation[0], s[3] * dilation[1]),
                      writeable=False)


def reference_im2col(x, kernel, stride, padding, dilation, out_hw):
    win = _windows(_padded(x, padding), kernel, stride, dilation, out_hw)   # (N, C, OH, OW, kh, kw)
    rows = x.shape[1] * kernel[0] * kernel[1]
    return np.ascontiguousarray(win.transpose(1, 4, 5, 0, 2, 3)).reshape(rows, -1)


def reference_col2im(cols, x_shape, kernel, stride, padding, dilation, out_hw=None):
    n, c, h, w = x_shape
    top, bottom, left, right = padding
    oh, ow = out_hw or output_hw((h, w), kernel, stride, padding, dilation)
    taps = cols.reshape(c, kernel[0], kernel[1], n, oh, ow)
    out = np.zeros((n, c, h + top + bottom, w + left + right), dtype=cols.dtype)
    for i in range(kernel[0]):  # one strided add per kernel tap
        row = i * dilation[0]
        for j in range(kernel[1]):
            col = j * dilation[1]
            out[:, :, row:row + stride[0] * (oh - 1) + 1:stride[0],
                col:col + stride[1] * (ow - 1) + 1:stride[1]] += taps[:, i, j].transpose(1, 0, 2, 3)
    return np.ascontiguousarray(out[:, :, top:top + h, left:left + w])


def _pool_windows(x, kernel, stride, padding, fill):
    out_hw = output_hw(x.shape[2:], kernel, stride, padding)
    win = _windows(_padded(x, padding, fill), kernel, stride, (1, 1), out_hw)
    return win.reshape(win.shape[:4] + (-1,)), out_hw                       # (N, C, OH, OW, kh*kw)


def _argmax_index(x, kernel, stride, padding):
    """Flat index into the padded plane of each window's maximum (first one on ties)."""
    win, (oh, ow) = _pool_windows(x, kernel, stride, padding, -np.inf)
    k = win.argmax(axis=-1)                                                 # (N, C, OH, OW)
    wp = x.shape[3] + padding[2] + padding[3]
    rows = np.arange(oh)[:, None] * stride[0] + k // kernel[1]
    cols = np.arange(ow)[None, :] * stride[1] + k % kernel[1]
    return rows * wp + cols


def reference_max_pool2d_forward(x, kernel, stride, padding):
    win, _ = _pool_windows(x, kernel, stride, padding, -np.inf)
    return win.max(axis=-1)


def reference_max_pool2d_backward(x, grad, kernel, stride, padding):
    n, c, h, w = x.shape
    hp, wp = h + padding[0] + padding[1], w + padding[2] + padding[3]
    flat = _argmax_index(x, kernel, stride, padding).reshape(n * c, -1)
    out = np.zeros((n * c, hp * wp), dtype=grad.dtype)
    base = (np.arange(n * c) * hp * wp)[:, None]
    np.add.at(out.reshape(-1), (flat + base).reshape(-1), grad.reshape(-1))
    out = out.reshape(n, c, hp, wp)[:, :, padding[0]:padding[0] + h, padding[2]:padding[2] + w]
    return np.ascontiguousarray(out)


def reference_max_pool2d_select(x, values, kernel, stride, padding):
    n, c, h, w = x.shape
    padded = _padded(values, padding).reshape(n * c, -1)
    flat = _argmax_index(x, kernel, stride, padding).reshape(n * c, -1)
    oh, ow = output_hw((h, w), kernel, stride, padding)
    return np.take_along_axis(padded, flat, axis=1).reshape(n, c, oh, ow)


def window_counts(in_hw, kernel, stride, padding, count_include_pad):
    """Divisor of each average: kh*kw, or the number of real (unpadded) elements in the window."""
    if count_include_pad or not any(padding):
        return float(kernel[0] * kernel[1])
    win, _ = _pool_windows(np.ones((1, 1) + tuple(in_hw)), kernel, stride, padding, 0.0)
    return win.sum(axis=-1)[0, 0]


def reference_avg_pool2d_forward(x, kernel, stride, padding, count_include_pad):
    win, _ = _pool_windows(x, kernel, stride, padding, 0.0)
    counts = window_counts(x.shape[2:], kernel, stride, padding, count_include_pad)
    return (win.sum(axis=-1) / counts).astype(x.dtype, copy=False)


def reference_avg_pool2d_backward(grad, x_shape, kernel, stride, padding, count_include_pad):
    n, c, h, w = x_shape
    share = grad / window_counts((h, w), kernel, stride, padding, count_include_pad)
    oh, ow = grad.shape[2:]
    out = np.zeros((n, c, h + padding[0] + padding[1], w + padding[2] + padding[3]), dtype=grad.dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            out[:, :, i:i + stride[0] * (oh - 1) + 1:stride[0], j:j + stride[1] * (ow - 1) + 1:stride[1]] += share
    return np.ascontiguousarray(out[:, :, padding[0]:padding[0] + h, padding[2]:padding[2] + w])


def _channel_major(a, groups):
    """(N, O, *spatial) -> (G, O/G, N*spatial): channels first, as the GEMMs need them."""
    n, o = a.shape[:2]
    rows = np.ascontiguousarray(a.reshape(n, o, -1).transpose(1, 0, 2))
    return rows.reshape(groups, o // groups, -1)


def _gemm(a, b):
    """(G, M, K) @ (G, K, N): one plain 2-D BLAS call when G == 1."""
    return np.matmul(a[0], b[0])[None] if a.shape[0] == 1 else np.matmul(a, b)


def reference_conv2d_forward(x, w, stride, padding, dilation, groups):
    n, o = x.shape[0], w.shape[0]
    oh, ow = output_hw(x.shape[2:], w.shape[2:], stride, padding, dilation)
    cols = reference_im2col(x, w.shape[2:], stride, padding, dilation, (oh, ow))   # (C*kh*kw, N*OH*OW)
    w_mat = w.reshape(groups, o // groups, -1)                                      # (G, O/G, C/G*kh*kw)
    out = _gemm(w_mat, cols.reshape(groups, w_mat.shape[2], -1))                    # (G, O/G, N*OH*OW)
    return np.ascontiguousarray(out.reshape(o, n, oh * ow).transpose(1, 0, 2)).reshape(n, o, oh, ow)


def reference_conv2d_backward_filter(x, grad, w_shape, stride, padding, dilation, groups):
    cols = reference_im2col(x, w_shape[2:], stride, padding, dilation, grad.shape[2:])
    cols = cols.reshape(groups, -1, cols.shape[1]).transpose(0, 2, 1)               # (G, N*OH*OW, C/G*kh*kw)
    return _gemm(_channel_major(grad, groups), cols).reshape(w_shape)


def reference_conv2d_backward_input(grad, w, x_shape, stride, padding, dilation, groups):
    o = w.shape[0]
    w_mat = w.reshape(groups, o // groups, -1).transpose(0, 2, 1)                   # (G, C/G*kh*kw, O/G)
    cols = _gemm(w_mat, _channel_major(grad, groups))                               # (G, C/G*kh*kw, N*OH*OW)
    return reference_col2im(cols.reshape(-1, cols.shape[2]), x_shape, w.shape[2:], stride, padding, dilation,
                            grad.shape[2:])


# ---- dispatch -----------------------------------------------------------------------------------

def im2col(x, kernel, stride, padding, dilation, out_hw=None):
    """(C*kh*kw, N*OH*OW) columns of the NCHW input x (see the module docstring)."""
    x = np.asarray(x)
    _check_nchw(x, "im2col input")
    out_hw = _covered_hw(x.shape, kernel, stride, padding, dilation, out_hw, "im2col")
    native = _kernel_for("conv_im2col", x)
    if native is None:
        return reference_im2col(x, kernel, stride, padding, dilation, out_hw)
    n, c = x.shape[:2]
    cols = np.empty((c * kernel[0] * kernel[1], n * out_hw[0] * out_hw[1]), dtype=x.dtype)
    native(np.ascontiguousarray(x), cols, _geometry(x.shape, out_hw, kernel, stride, padding, dilation))
    return cols


def col2im(cols, x_shape, kernel, stride, padding, dilation, out_hw=None):
    """The adjoint of im2col: an x_shape array where each column entry is added back."""
    cols = np.asarray(cols)
    out_hw = _covered_hw(x_shape, kernel, stride, padding, dilation, out_hw, "col2im")
    n, c = x_shape[:2]
    expected = (c * kernel[0] * kernel[1], n * out_hw[0] * out_hw[1])
    if cols.shape != expected:
        raise ShapeError(f"col2im: columns have shape {cols.shape}, {tuple(x_shape)} needs {expected}")
    native = _kernel_for("conv_col2im", cols)
    if native is None:
        return reference_col2im(cols, x_shape, kernel, stride, padding, dilation, out_hw)
    x = np.empty(tuple(x_shape), dtype=cols.dtype)
    native(np.ascontiguousarray(cols), x, _geometry(x_shape, out_hw, kernel, stride, padding, dilation))
    return x


def max_pool2d_forward(x, kernel, stride, padding, out=None):
    x = np.asarray(x)
    _check_nchw(x, "max_pool2d input")
    out_hw = output_hw(x.shape[2:], kernel, stride, padding)
    result = _into(out, x.shape[:2] + out_hw, x.dtype, "max_pool2d_forward")
    native = _kernel_for("max_pool2d_forward", x)
    if native is None:
        return _reference_into(out, reference_max_pool2d_forward(x, kernel, stride, padding))
    native(np.ascontiguousarray(x), result, _geometry(x.shape, out_hw, kernel, stride, padding))
    return result


def _pool_pair(x, other, kernel, stride, padding, other_hw, name):
    _check_nchw(x, f"{name} x")
    out_hw = output_hw(x.shape[2:], kernel, stride, padding)
    expected = x.shape[:2] + (out_hw if other_hw == "out" else x.shape[2:])
    if other.shape != expected:
        raise ShapeError(f"{name}: second operand has shape {other.shape}, expected {expected}")
    return out_hw


def max_pool2d_backward(x, grad, kernel, stride, padding, out=None):
    x, grad = np.asarray(x), np.asarray(grad)
    out_hw = _pool_pair(x, grad, kernel, stride, padding, "out", "max_pool2d_backward")
    dx = _into(out, x.shape, np.result_type(x, grad), "max_pool2d_backward")
    native = _kernel_for("max_pool2d_backward", x, grad)
    if native is None:
        return _reference_into(out, reference_max_pool2d_backward(x, grad, kernel, stride, padding))
    native(np.ascontiguousarray(x), np.ascontiguousarray(grad), dx, _geometry(x.shape, out_hw, kernel, stride, padding))
    return dx


def max_pool2d_select(x, values, kernel, stride, padding, out=None):
    x, values = np.asarray(x), np.asarray(values)
    out_hw = _pool_pair(x, values, kernel, stride, padding, "in", "max_pool2d_select")
    result = _into(out, x.shape[:2] + out_hw, np.result_type(x, values), "max_pool2d_select")
    native = _kernel_for("max_pool2d_select", x, values)
    if native is None:
        return _reference_into(out, reference_max_pool2d_select(x, values, kernel, stride, padding))
    native(np.ascontiguousarray(x), np.ascontiguousarray(values), result,
           _geometry(x.shape, out_hw, kernel, stride, padding))
    return result


def avg_pool2d_forward(x, kernel, stride, padding, count_include_pad=True, out=None):
    x = np.asarray(x)
    _check_nchw(x, "avg_pool2d input")
    out_hw = output_hw(x.shape[2:], kernel, stride, padding)
    result = _into(out, x.shape[:2] + out_hw, x.dtype, "avg_pool2d_forward")
    native = _kernel_for("avg_pool2d_forward", x)
    if native is None:
        return _reference_into(out, reference_avg_pool2d_forward(x, kernel, stride, padding, count_include_pad))
    native(np.ascontiguousarray(x), result, _geometry(x.shape, out_hw, kernel, stride, padding),
           bool(count_include_pad))
    return result


def avg_pool2d_backward(grad, x_shape, kernel, stride, padding, count_include_pad=True, out=None):
    grad = np.asarray(grad)
    out_hw = output_hw(x_shape[2:], kernel, stride, padding)
    if grad.shape != tuple(x_shape[:2]) + out_hw:
        raise ShapeError(f"avg_pool2d_backward: grad has shape {grad.shape}, expected {tuple(x_shape[:2]) + out_hw}")
    dx = _into(out, x_shape, grad.dtype, "avg_pool2d_backward")
    native = _kernel_for("avg_pool2d_backward", grad)
    if native is None:
        return _reference_into(out, reference_avg_pool2d_backward(grad, x_shape, kernel, stride, padding,
                                                                  count_include_pad))
    native(np.ascontiguousarray(grad), dx, _geometry(x_shape, out_hw, kernel, stride, padding), bool(count_include_pad))
    return dx


def _conv_geometry(x_shape, w_shape, groups, name):
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise ShapeError(f"{name}: input {list(x_shape)} and weight {list(w_shape)} must be 4-D (NCHW, OIhw)")
    if groups < 1 or x_shape[1] % groups or w_shape[0] % groups or x_shape[1] // groups != w_shape[1]:
        raise ShapeError(f"{name}: input channels {x_shape[1]}, weight {list(w_shape)} and groups {groups} "
                         "do not fit (weight must be (out, in / groups, kh, kw))")


def conv2d_forward(x, w, stride, padding, dilation, groups=1, out=None):
    """(N, C, H, W) * (O, C/groups, kh, kw) -> (N, O, OH, OW), cross-correlation."""
    x, w = np.asarray(x), np.asarray(w)
    _conv_geometry(x.shape, w.shape, groups, "conv2d")
    out_hw = output_hw(x.shape[2:], w.shape[2:], stride, padding, dilation)
    result = _into(out, (x.shape[0], w.shape[0]) + out_hw, np.result_type(x, w), "conv2d_forward")
    native = _conv_kernel("conv2d_forward", x, w) if x.shape[0] else None
    if native is None:
        return _reference_into(out, reference_conv2d_forward(x, w, stride, padding, dilation, groups))
    native(np.ascontiguousarray(x), np.ascontiguousarray(w), result,
           _geometry(x.shape, out_hw, w.shape[2:], stride, padding, dilation), w.shape[0], groups)
    return result


def conv2d_backward_filter(x, grad, w_shape, stride, padding, dilation, groups=1, out=None):
    """The weight gradient of conv2d_forward: (O, C/groups, kh, kw)."""
    x, grad = np.asarray(x), np.asarray(grad)
    w_shape = tuple(int(v) for v in w_shape)
    _conv_geometry(x.shape, w_shape, groups, "conv2d_backward_filter")
    out_hw = _covered_hw(x.shape, w_shape[2:], stride, padding, dilation, grad.shape[2:], "conv2d_backward_filter")
    if grad.shape[:2] != (x.shape[0], w_shape[0]):
        raise ShapeError(f"conv2d_backward_filter: grad {grad.shape} does not fit input {x.shape} and weight {w_shape}")
    dw = _into(out, w_shape, np.result_type(x, grad), "conv2d_backward_filter")
    native = _conv_kernel("conv2d_backward_filter", x, grad) if x.shape[0] else None
    if native is None:
        return _reference_into(out, reference_conv2d_backward_filter(x, grad, w_shape, stride, padding, dilation,
                                                                     groups))
    native(np.ascontiguousarray(x), np.ascontiguousarray(grad), dw,
           _geometry(x.shape, out_hw, w_shape[2:], stride, padding, dilation), w_shape[0], groups)
    return dw


def conv2d_backward_input(grad, w, x_shape, stride, padding, dilation, groups=1, out=None):
    """The input gradient of conv2d_forward (a transposed convolution of grad): x_shape."""
    grad, w = np.asarray(grad), np.asarray(w)
    x_shape = tuple(int(v) for v in x_shape)
    _conv_geometry(x_shape, w.shape, groups, "conv2d_backward_input")
    out_hw = _covered_hw(x_shape, w.shape[2:], stride, padding, dilation, grad.shape[2:], "conv2d_backward_input")
    if grad.shape[:2] != (x_shape[0], w.shape[0]):
        raise ShapeError(f"conv2d_backward_input: grad {grad.shape} does not fit input {x_shape} and weight {w.shape}")
    dx = _into(out, x_shape, np.result_type(grad, w), "conv2d_backward_input")
    native = _conv_kernel("conv2d_backward_input", grad, w) if x_shape[0] else None
    if native is None:
        return _reference_into(out, reference_conv2d_backward_input(grad, w, x_shape, stride, padding, dilation,
                                                                    groups))
    native(np.ascontiguousarray(grad), np.ascontiguousarray(w), dx,
           _geometry(x_shape, out_hw, w.shape[2:], stride, padding, dilation), w.shape[0], groups)
    return dx


def conv2d_c_call(name, a, b, out, stride, padding, dilation, groups=1):
    """(address, params) of the C entry of the convolution pass `name` (conv2d_forward,
    conv2d_backward_filter, conv2d_backward_input) on these operands, in the order of its function
    here and with its `out`, for the compiled step loop: params = (is_double, the 14 geometry values,
    out_channels, groups). None when the C++ kernel would not run on them."""
    if not all(isinstance(v, np.ndarray) and v.flags.c_contiguous for v in (a, b, out)):
        return None
    if a.dtype != b.dtype or a.dtype != out.dtype or _conv_kernel(name, a, b) is None or not a.shape[0]:
        return None
    if name == "conv2d_forward":
        x_shape, w_shape, y_shape = a.shape, b.shape, None
    elif name == "conv2d_backward_filter":
        x_shape, w_shape, y_shape = a.shape, out.shape, b.shape
    else:
        x_shape, w_shape, y_shape = out.shape, b.shape, a.shape
    _conv_geometry(x_shape, w_shape, groups, name)
    full = output_hw(x_shape[2:], w_shape[2:], stride, padding, dilation)
    out_hw = full if y_shape is None else _covered_hw(x_shape, w_shape[2:], stride, padding, dilation, y_shape[2:],
                                                      name)
    expected = {"conv2d_forward": (x_shape[0], w_shape[0]) + out_hw}.get(name)
    if expected is not None and out.shape != expected:
        return None
    if y_shape is not None and y_shape[:2] != (x_shape[0], w_shape[0]):
        return None
    geometry = _geometry(x_shape, out_hw, w_shape[2:], stride, padding, dilation)
    params = [int(a.dtype == np.float64), *geometry, int(w_shape[0]), int(groups)]
    return _native("conv_c_entry")(name), params


# each pooling pass: (index of the operand with the input's shape or None, the input-shaped operands,
# the window-shaped operands), over its arrays in the order of its function here (out last)
_POOL_OPERANDS = {"max_pool2d_forward": (0, (0,), (1,)), "max_pool2d_backward": (0, (0, 2), (1,)),
                  "max_pool2d_select": (0, (0, 1), (2,)), "avg_pool2d_forward": (0, (0,), (1,)),
                  "avg_pool2d_backward": (None, (1,), (0,))}


def pool2d_c_call(name, arrays, kernel, stride, padding, count_include_pad=False, input_shape=None):
    """(address, params) of the C entry of the pooling pass `name` on `arrays` (its operands in the
    order of its function here, then its out), for the compiled step loop: params = (is_double, the
    14 geometry values, count_include_pad). None when the C++ kernel would not run on them."""
    if not all(isinstance(a, np.ndarray) and a.flags.c_contiguous and a.dtype == arrays[0].dtype for a in arrays):
        return None
    if _kernel_for(name, arrays[0]) is None or _native("pool_c_entry") is None:
        return None
    source, full, windows = _POOL_OPERANDS[name]
    x_shape = tuple(arrays[source].shape) if source is not None else tuple(int(v) for v in input_shape)
    if len(x_shape) != 4:
        return None
    out_hw = output_hw(x_shape[2:], kernel, stride, padding)
    if any(arrays[k].shape != x_shape for k in full) or any(arrays[k].shape != x_shape[:2] + out_hw for k in windows):
        return None
    params = [int(arrays[0].dtype == np.float64), *_geometry(x_shape, out_hw, kernel, stride, padding),
              int(bool(count_include_pad))]
    return _native("pool_c_entry")(name), params
