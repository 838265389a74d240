"""The convolution and pooling kernels (mstrain.kernels.conv): C++ against the numpy references, and
the references against plain loops."""
import numpy as np
import pytest

from mstrain import kernels
from mstrain.errors import ShapeError
from mstrain.kernels import conv as K

NAMES = ["conv_im2col", "conv_col2im", "max_pool2d_forward", "max_pool2d_backward", "max_pool2d_select",
         "avg_pool2d_forward", "avg_pool2d_backward"]

# (x shape, kernel, stride, padding (top, bottom, left, right), dilation)
GEOMETRIES = [
    ((2, 3, 7, 6), (3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((3, 2, 9, 8), (3, 2), (2, 3), (1, 2, 0, 1), (1, 1)),
    ((1, 4, 8, 9), (2, 3), (1, 2), (2, 1, 1, 2), (2, 1)),
    ((2, 1, 5, 5), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    ((2, 3, 6, 7), (3, 3), (1, 1), (2, 0, 1, 1), (2, 1)),  # stride 1, rows as long as the input's
]
POOLS = [g for g in GEOMETRIES if g[3][0] < g[1][0] and g[3][1] < g[1][0] and max(g[3][2:]) < g[1][1]]


def _native_only(monkeypatch):
    monkeypatch.delenv("MSTRAIN_DISABLE_KERNELS", raising=False)
    if not all(kernels.available(name) for name in NAMES):
        pytest.skip("C++ conv kernels are not built (pip install -e . builds them)")


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def _loop_im2col(x, kernel, stride, padding, dilation):
    n, c, h, w = x.shape
    oh, ow = K.output_hw((h, w), kernel, stride, padding, dilation)
    cols = np.zeros((c, kernel[0], kernel[1], n, oh, ow), x.dtype)
    for ci, i, j, ni, r, q in np.ndindex(cols.shape):
        ih = r * stride[0] - padding[0] + i * dilation[0]
        iw = q * stride[1] - padding[2] + j * dilation[1]
        if 0 <= ih < h and 0 <= iw < w:
            cols[ci, i, j, ni, r, q] = x[ni, ci, ih, iw]
    return cols.reshape(c * kernel[0] * kernel[1], -1)


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_im2col_reference_matches_loop_and_col2im_is_its_adjoint(geometry):
    shape, kernel, stride, padding, dilation = geometry
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape)
    cols = K.reference_im2col(x, kernel, stride, padding, dilation,
                              K.output_hw(shape[2:], kernel, stride, padding, dilation))
    np.testing.assert_array_equal(cols, _loop_im2col(x, kernel, stride, padding, dilation))
    c = rng.standard_normal(cols.shape)
    back = K.reference_col2im(c, shape, kernel, stride, padding, dilation)
    np.testing.assert_allclose(np.vdot(cols, c), np.vdot(x, back), rtol=1e-12)  # <im2col x, c> = <x, col2im c>


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_native_im2col_col2im_match_numpy(monkeypatch, geometry, dtype):
    _native_only(monkeypatch)
    shape, kernel, stride, padding, dilation = geometry
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(dtype)
    out_hw = K.output_hw(shape[2:], kernel, stride, padding, dilation)
    cols = K.im2col(x, kernel, stride, padding, dilation)
    np.testing.assert_array_equal(cols, K.reference_im2col(x, kernel, stride, padding, dilation, out_hw))
    c = rng.standard_normal(cols.shape).astype(dtype)
    np.testing.assert_allclose(K.col2im(c, shape, kernel, stride, padding, dilation),
                               K.reference_col2im(c, shape, kernel, stride, padding, dilation), **_tol(dtype))


def _pool_input(rng, shape, dtype):
    """Values with ties (rounded) so the first-maximum rule is exercised."""
    return np.round(rng.standard_normal(shape) * 2).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", POOLS)
def test_native_max_pool_matches_numpy(monkeypatch, geometry, dtype):
    _native_only(monkeypatch)
    shape, kernel, stride, padding, _ = geometry
    rng = np.random.default_rng(3)
    x = _pool_input(rng, shape, dtype)
    x.flat[5] = np.nan  # a NaN wins its windows, as numpy's max / argmax
    out = K.max_pool2d_forward(x, kernel, stride, padding)
    np.testing.assert_array_equal(out, K.reference_max_pool2d_forward(x, kernel, stride, padding))
    g = rng.standard_normal(out.shape).astype(dtype)
    np.testing.assert_allclose(K.max_pool2d_backward(x, g, kernel, stride, padding),
                               K.reference_max_pool2d_backward(x, g, kernel, stride, padding), **_tol(dtype))
    values = rng.standard_normal(shape).astype(dtype)
    np.testing.assert_array_equal(K.max_pool2d_select(x, values, kernel, stride, padding),
                                  K.reference_max_pool2d_select(x, values, kernel, stride, padding))


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", POOLS)
def test_native_avg_pool_matches_numpy(monkeypatch, geometry, dtype, count_include_pad):
    _native_only(monkeypatch)
    shape, kernel, stride, padding, _ = geometry
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(dtype)
    out = K.avg_pool2d_forward(x, kernel, stride, padding, count_include_pad)
    np.testing.assert_allclose(out, K.reference_avg_pool2d_forward(x, kernel, stride, padding, count_include_pad),
                               **_tol(dtype))
    g = rng.standard_normal(out.shape).astype(dtype)
    np.testing.assert_allclose(K.avg_pool2d_backward(g, shape, kernel, stride, padding, count_include_pad),
                               K.reference_avg_pool2d_backward(g, shape, kernel, stride, padding, count_include_pad),
                               **_tol(dtype))


def test_numpy_path_when_disabled(monkeypatch):
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    calls = []
    monkeypatch.setattr(K, "reference_max_pool2d_forward", lambda *a: calls.append(a) or "numpy")
    assert K.max_pool2d_forward(np.zeros((1, 1, 4, 4), np.float32), (2, 2), (2, 2), (0, 0, 0, 0)) == "numpy"
    assert len(calls) == 1


def test_bad_shapes_name_the_operand():
    x = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(ShapeError, match="does not fit"):
        K.im2col(x, (5, 5), (1, 1), (0, 0, 0, 0), (1, 1))
    with pytest.raises(ShapeError, match="second operand"):
        K.max_pool2d_backward(x, np.zeros((1, 2, 3, 3), np.float32), (2, 2), (2, 2), (0, 0, 0, 0))
    with pytest.raises(ShapeError, match="columns have shape"):
        K.col2im(np.zeros((3, 4), np.float32), (1, 2, 4, 4), (2, 2), (1, 1), (0, 0, 0, 0), (1, 1))


CONV_NAMES = ["conv2d_forward", "conv2d_backward_filter", "conv2d_backward_input"]
# (x shape, weight shape, stride, padding, dilation, groups); the last has columns of about 660 KB a
# sample, so the C++ passes go through the batch in several chunks. Float32 planes of >= 128 outputs
# take the small-GEMM kernels: the last three (the first of them: 130 outputs, ragged rows and columns
# of the register tiles, masked last columns, grouped, 10 samples = filter blocks of 8 and 2)
CONVS = [
    ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((3, 4, 9, 8), (6, 2, 3, 2), (2, 3), (1, 2, 0, 1), (1, 2), 2),
    ((2, 4, 6, 6), (4, 1, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 4),
    ((10, 6, 13, 12), (10, 3, 3, 3), (1, 1), (1, 0, 2, 1), (2, 1), 2),
    ((2, 4, 12, 14), (6, 4, 3, 3), (1, 1), (2, 2, 1, 1), (2, 1), 1),  # stride 1, rows as long as the input's
    ((3, 8, 48, 48), (5, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CONVS)
def test_native_conv_passes_match_numpy(monkeypatch, case, dtype):
    _native_only(monkeypatch)
    x_shape, w_shape, stride, padding, dilation, groups = case
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
    for name in CONV_NAMES:  # prove the C++ path runs
        monkeypatch.setattr(K, f"reference_{name}", _must_not_run)
    out = K.conv2d_forward(x, w, stride, padding, dilation, groups)
    monkeypatch.undo()
    _native_only(monkeypatch)
    _close(out, K.reference_conv2d_forward(x, w, stride, padding, dilation, groups))
    g = rng.standard_normal(out.shape).astype(dtype)
    _close(K.conv2d_backward_filter(x, g, w_shape, stride, padding, dilation, groups),
           K.reference_conv2d_backward_filter(x, g, w_shape, stride, padding, dilation, groups))
    _close(K.conv2d_backward_input(g, w, x_shape, stride, padding, dilation, groups),
           K.reference_conv2d_backward_input(g, w, x_shape, stride, padding, dilation, groups))


def _close(actual, expected):
    """Equal up to the rounding of sums over thousands of terms in another order (chunked GEMMs)."""
    eps = np.finfo(expected.dtype).eps
    np.testing.assert_allclose(actual, expected, rtol=0, atol=100 * eps * np.abs(expected).max())


def _must_not_run(*args, **kwargs):
    raise AssertionError("numpy reference used although the C++ kernel is available")


def test_reference_conv_passes_are_adjoint():
    x_shape, w_shape, stride, padding, dilation, groups = CONVS[1]
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    out = K.reference_conv2d_forward(x, w, stride, padding, dilation, groups)
    g = rng.standard_normal(out.shape)
    # <conv(x, w), g> = <x, dconv/dx^T g> = <w, dconv/dw^T g>
    np.testing.assert_allclose(np.vdot(out, g), np.vdot(
        x, K.reference_conv2d_backward_input(g, w, x_shape, stride, padding, dilation, groups)), rtol=1e-10)
    np.testing.assert_allclose(np.vdot(out, g), np.vdot(
        w, K.reference_conv2d_backward_filter(x, g, w_shape, stride, padding, dilation, groups)), rtol=1e-10)


def test_transposed_convolution_covers_fewer_windows(monkeypatch):
    """An input gradient whose grad covers fewer windows than fit (conv_transpose2d's output_padding)."""
    rng = np.random.default_rng(7)
    g, w = rng.standard_normal((1, 3, 4, 5)).astype(np.float32), rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    expected = K.reference_conv2d_backward_input(g, w, (1, 2, 10, 12), (2, 2), (0, 1, 0, 1), (1, 1), 1)
    _native_only(monkeypatch)
    np.testing.assert_allclose(K.conv2d_backward_input(g, w, (1, 2, 10, 12), (2, 2), (0, 1, 0, 1), (1, 1), 1),
                               expected, rtol=1e-5, atol=1e-5)


def test_float16_convolution_and_pooling_compute_in_float32():
    """float16 storage, float32 arithmetic (BLAS has no float16): the result is the float32 result rounded."""
    from mstrain.ops import conv as C
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((2, 3, 8, 8)).astype(np.float16), rng.standard_normal((4, 3, 3, 3)).astype(np.float16)
    geometry = ((1, 1), (1, 1, 1, 1), (1, 1), 1)
    out = C.conv2d.impl(x, w, *geometry)
    assert out.dtype == np.float16
    expected = C.conv2d.impl(x.astype(np.float32), w.astype(np.float32), *geometry).astype(np.float16)
    np.testing.assert_array_equal(out, expected)
    g = rng.standard_normal(out.shape).astype(np.float16)
    gw = C.conv2d_backprop_filter.impl(x, g, w.shape, *geometry)
    gx = C.conv2d_backprop_input.impl(g, w, x.shape, *geometry)
    assert gw.dtype == gx.dtype == np.float16
    np.testing.assert_array_equal(gw, C.conv2d_backprop_filter.impl(
        x.astype(np.float32), g.astype(np.float32), w.shape, *geometry).astype(np.float16))
    np.testing.assert_array_equal(gx, C.conv2d_backprop_input.impl(
        g.astype(np.float32), w.astype(np.float32), x.shape, *geometry).astype(np.float16))
    pooled = C.max_pool2d.impl(x, (2, 2), (2, 2))
    assert pooled.dtype == np.float16
    np.testing.assert_array_equal(pooled, x.reshape(2, 3, 4, 2, 4, 2).max(axis=(3, 5)))


@pytest.mark.parametrize("path", ["native", "numpy"])
def test_results_go_into_a_planned_buffer(monkeypatch, path):
    if path == "numpy":
        monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    else:
        _native_only(monkeypatch)
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((2, 3, 6, 6)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    conv = ((1, 1), (1, 1, 1, 1), (1, 1), 1)
    expected = K.reference_conv2d_forward(x, w, *conv)
    buffer = np.full(expected.shape, np.nan, np.float32)
    assert K.conv2d_forward(x, w, *conv, out=buffer) is buffer
    _close(buffer, expected)
    g = rng.standard_normal(expected.shape).astype(np.float32)
    for fn, args, want in (
            (K.conv2d_backward_filter, (x, g, w.shape, *conv),
             K.reference_conv2d_backward_filter(x, g, w.shape, *conv)),
            (K.conv2d_backward_input, (g, w, x.shape, *conv), K.reference_conv2d_backward_input(g, w, x.shape, *conv)),
            (K.max_pool2d_forward, (x, (2, 2), (2, 2), (0, 0, 0, 0)), K.reference_max_pool2d_forward(
                x, (2, 2), (2, 2), (0, 0, 0, 0))),
            (K.avg_pool2d_backward, (x[:, :, :3, :3], x.shape, (2, 2), (2, 2), (0, 0, 0, 0)),
             K.reference_avg_pool2d_backward(x[:, :, :3, :3], x.shape, (2, 2), (2, 2), (0, 0, 0, 0), True))):
        buffer = np.empty(want.shape, np.float32)
        assert fn(*args, out=buffer) is buffer
        _close(buffer, want)
    with pytest.raises(ShapeError, match="out must be a C-contiguous float32 array of shape"):
        K.conv2d_forward(x, w, *conv, out=np.empty((2, 4, 6, 5), np.float32))
