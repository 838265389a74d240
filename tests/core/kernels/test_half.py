"""mstrain.kernels.half: the C conversions give numpy's astype bits, with and without the C path."""
import numpy as np
import pytest

from mstrain.kernels.half import to_float16, to_float32


@pytest.mark.parametrize("disabled", ["0", "1"])
def test_conversions_equal_numpy_astype(monkeypatch, disabled):
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", disabled)
    rng = np.random.default_rng(0)
    halves = np.arange(65536, dtype=np.uint16).view(np.float16).reshape(256, 256)
    got = to_float32(halves.T)                                  # a transposed (non-contiguous) input
    want = halves.T.astype(np.float32)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)                   # nan == nan for assert_array_equal
    floats = np.concatenate([rng.standard_normal(10_000).astype(np.float32) * s for s in (1e-6, 1.0, 3e4, 1e5)])
    with np.errstate(over="ignore"):
        reference = floats.astype(np.float16)
    np.testing.assert_array_equal(to_float16(floats).view(np.uint16), reference.view(np.uint16))
    out = np.zeros(floats.shape, np.float16)
    assert to_float16(floats, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint16), reference.view(np.uint16))


def test_wrong_dtype_is_named():
    with pytest.raises(TypeError, match="to_float32 expects a float16 array, got float32"):
        to_float32(np.zeros(3, np.float32))
