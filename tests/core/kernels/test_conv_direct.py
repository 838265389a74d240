"""The direct (shifted-plane) float32 convolution of conv.cpp, taken with one group and at least 32
products per output (the input gradient at a stride from 128 output positions on, per phase plane of
dx; the filter gradient of one channel too): its three passes against the numpy references and against PyTorch (skipped without torch), on the shapes that select each of its layouts."""
import numpy as np
import pytest

from mstrain import kernels
from mstrain.kernels import conv as K

from ...torch_support import import_torch
from ..graph._thread_probe import run_probe

# (x shape, weight shape, stride, padding (top, bottom, left, right), dilation). Output channels that
# fill whole vectors (multiples of 32) on a plane of < 256 grid positions run transposed (positions as
# the GEMM's rows), the others with the channels as rows; 9 samples make filter blocks of 8 and 1.
DIRECT = [
    ((9, 32, 7, 7), (64, 32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),    # ResNet-8's last stage: transposed
    ((3, 6, 12, 12), (16, 6, 5, 5), (1, 1), (0, 0, 0, 0), (1, 1)),    # LeNet's second conv: channels as rows
    ((2, 16, 10, 9), (16, 16, 3, 3), (1, 1), (2, 0, 1, 1), (2, 1)),   # dilated, padded on one side
    ((2, 32, 5, 6), (32, 32, 2, 3), (1, 1), (0, 1, 2, 0), (1, 1)),    # even kernel, asymmetric padding
    ((2, 32, 4, 4), (32, 32, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),    # 1x1
    ((2, 16, 28, 28), (16, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # a long plane: channels as rows
    ((9, 16, 14, 14), (32, 16, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # stride 2 (phase planes), transposed
    ((2, 8, 13, 11), (8, 8, 3, 2), (2, 3), (1, 0, 2, 1), (2, 1)),     # uneven strides, dilation, odd sizes
    ((3, 16, 28, 28), (32, 16, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # ResNet-8's stage 2 entry: strided dx phases
    ((2, 32, 29, 27), (8, 32, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),   # strided 1x1: dx phases without taps
    ((2, 8, 30, 40), (5, 8, 3, 5), (2, 3), (2, 0, 1, 3), (1, 2)),     # strided dx: uneven strides, dilation
    ((1, 40, 50, 50), (3, 40, 3, 3), (4, 4), (1, 1, 1, 1), (1, 1)),   # stride 4: phases with 0, 1 and 4 taps
    ((9, 1, 28, 28), (6, 1, 5, 5), (1, 1), (0, 0, 0, 0), (1, 1)),     # LeNet's stem: the filter gradient only
    ((2, 1, 11, 12), (16, 1, 3, 4), (2, 1), (1, 1, 2, 1), (2, 2)),    # a dilated one-channel stem
    # at most 16 output channels on >= 256 output positions: the filter gradient by lanes (tiles of
    # 4 output channels x 6 (channel, tap) pairs, with remainders; blocks of 2 samples, one left over)
    ((9, 5, 40, 36), (6, 5, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),    # strided (phase planes)
    ((3, 4, 30, 30), (10, 4, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),   # dilated
    ((3, 1, 28, 28), (6, 1, 5, 5), (1, 1), (0, 0, 0, 0), (1, 1)),    # LeNet's stem
    ((3, 1, 28, 28), (16, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),   # ResNet-8's 3x3 stem (its other passes: im2col)
    ((2, 8, 20, 20), (12, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),   # a narrow 1x1 (its other passes: im2col)
]


def _operands(case, seed):
    x_shape, w_shape = case[:2]
    rng = np.random.default_rng(seed)
    fan_in = w_shape[1] * w_shape[2] * w_shape[3]
    x = rng.uniform(-1, 1, x_shape).astype(np.float32)
    w = (rng.uniform(-1, 1, w_shape) / np.sqrt(fan_in)).astype(np.float32)
    return x, w


def _passes(x, w, g, stride, padding, dilation):
    return (K.conv2d_forward(x, w, stride, padding, dilation),
            K.conv2d_backward_input(g, w, x.shape, stride, padding, dilation),
            K.conv2d_backward_filter(x, g, w.shape, stride, padding, dilation))


@pytest.fixture
def native(monkeypatch):
    monkeypatch.delenv("MSTRAIN_DISABLE_KERNELS", raising=False)
    if not kernels.available("conv2d_forward"):
        pytest.skip("C++ conv kernels are not built (pip install -e . builds them)")


@pytest.mark.parametrize("case", DIRECT)
def test_direct_passes_match_numpy(native, case):
    x, w = _operands(case, 1)
    _, _, stride, padding, dilation = case
    out = K.reference_conv2d_forward(x, w, stride, padding, dilation, 1)
    g = np.random.default_rng(2).uniform(-1, 1, out.shape).astype(np.float32)
    expected = (out, K.reference_conv2d_backward_input(g, w, x.shape, stride, padding, dilation, 1),
                K.reference_conv2d_backward_filter(x, g, w.shape, stride, padding, dilation, 1))
    for name, actual, want in zip(("forward", "input grad", "filter grad"), _passes(x, w, g, stride, padding, dilation),
                                  expected):
        np.testing.assert_allclose(actual, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()), err_msg=name)


@pytest.mark.parametrize("case", DIRECT)
def test_direct_passes_match_torch(native, case):
    torch = import_torch()
    x, w = _operands(case, 3)
    _, _, stride, padding, dilation = case
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    padded = torch.nn.functional.pad(tx, (padding[2], padding[3], padding[0], padding[1]))
    t_out = torch.nn.functional.conv2d(padded, tw, None, stride, 0, dilation)
    g = np.random.default_rng(4).uniform(-1, 1, tuple(t_out.shape)).astype(np.float32)
    t_out.backward(torch.tensor(g))
    expected = (t_out.detach().numpy(), tx.grad.numpy(), tw.grad.numpy())
    for name, actual, want in zip(("forward", "input grad", "filter grad"), _passes(x, w, g, stride, padding, dilation),
                                  expected):
        np.testing.assert_allclose(actual, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()), err_msg=name)


_THREADS_PROBE = """
import sys
import numpy as np
from mstrain.kernels import conv as K
rng = np.random.default_rng(0)
arrays = []
for xs, ws, stride in [((16, 32, 7, 7), (64, 32, 3, 3), (1, 1)), ((18, 16, 14, 14), (32, 16, 3, 3), (2, 2)),
                       ((6, 16, 28, 28), (32, 16, 3, 3), (2, 2)), ((7, 16, 28, 28), (16, 16, 3, 3), (1, 1))]:
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    y = K.conv2d_forward(x, w, stride, (1, 1, 1, 1), (1, 1))
    g = rng.standard_normal(y.shape).astype(np.float32)
    arrays += [y, K.conv2d_backward_filter(x, g, ws, stride, (1, 1, 1, 1), (1, 1)),
               K.conv2d_backward_input(g, w, xs, stride, (1, 1, 1, 1), (1, 1))]
np.savez(sys.argv[1], *arrays)
"""


def test_direct_results_do_not_depend_on_the_thread_count(native, tmp_path):
    """Samples go to the threads and the filter gradient sums fixed blocks of samples in order: one
    and two threads give the same bits."""
    results = [list(run_probe(_THREADS_PROBE, tmp_path, threads, blas_threads=threads, timeout=120).values())
               for threads in (1, 2)]
    assert len(results[0]) == len(results[1]) == 12
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)
