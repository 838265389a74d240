"""mstrain.kernels.half: the C conversions give numpy's astype bits, with and without the C path."""
import numpy as np
import pytest

from mstrain.kernels.half import astype, to_float16, to_float32


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


def test_astype_gives_numpys_bits_and_dtype_for_every_size_and_layout():
    rng = np.random.default_rng(3)
    wide = np.concatenate([rng.standard_normal(30000) * 10, [7e4, -7e4, 1e-8, np.inf, -np.inf, -0.0]]).astype(np.float32)
    for x in (wide, wide[:100], wide.reshape(6, -1).T, wide[::3]):  # large, small, transposed, strided
        with np.errstate(over="ignore"):
            want = x.astype(np.float16)
        got = astype(x, np.float16)
        assert got.dtype == np.float16 and got.shape == x.shape
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
        back = astype(got, np.float32)
        np.testing.assert_array_equal(back, want.astype(np.float32))
    assert astype(wide, np.float64).dtype == np.float64 and astype(wide, np.float32) is not wide


def test_conversions_from_several_threads_at_once_keep_their_own_arguments():
    """The C call's argument arrays are per thread: threads converting different arrays at once each
    get their own values."""
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(5)
    arrays = [(rng.standard_normal(5000 + 97 * k) * (k + 1)).astype(np.float32) for k in range(16)]

    def convert(x):
        return [to_float16(x) for _ in range(50)][-1]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(convert, arrays))
    for x, got in zip(arrays, results):
        np.testing.assert_array_equal(got.view(np.uint16), x.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("disabled", ["0", "1"])
def test_float16_sums_over_leading_axes_give_numpys_bits(monkeypatch, disabled):
    """The eager sum of a float16 array over its leading axes (a bias gradient) runs in C from a few
    thousand values: numpy's row-by-row float16 additions, the same bits, overflow to inf included."""
    import mstrain as ms
    from mstrain import ops
    from mstrain.kernels.half import sum_float16
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", disabled)
    rng = np.random.default_rng(7)
    overflowed = False
    for shape, axis in [((32, 128), 0), ((64, 300), (0,)), ((8, 40, 33), (0, 1)), ((4, 6, 200), 0),
                        ((512, 10), 0), ((3, 5), 0)]:
        x = (rng.standard_normal(shape) * 3000).astype(np.float16)  # large: some running sums overflow
        lead = 1 if isinstance(axis, int) else len(axis)
        with np.errstate(over="ignore"):
            want = np.sum(x, axis=tuple(range(lead)))
            got = sum_float16(x, axis)
            eager = ops.sum(ms.Tensor(x), axis).asnumpy()
        assert got.dtype == np.float16 and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
        np.testing.assert_array_equal(eager.view(np.uint16), want.view(np.uint16))
        overflowed |= bool(np.isinf(want).any())
    assert overflowed


@pytest.mark.parametrize("bits", [0, 256])
def test_the_extensions_conversion_is_numpys_on_both_instruction_sets(bits):
    """half_convert (the float16 product's F16C conversions, which to_float32 / to_float16 and astype
    call) against numpy: every float16 value widened, and float32 values of every scale rounded,
    overflow to inf, subnormals, ties and nan included, with lengths that leave a masked tail."""
    from mstrain.kernels import thin_gemm
    module = thin_gemm._native_half()
    if module is None:
        pytest.skip("thin_gemm extension not built or no F16C")
    halves = np.arange(65536, dtype=np.uint16).view(np.float16)
    for n in (65536, 65536 - 7, 5):
        wide = np.full(n, -1.0, np.float32)
        module.half_convert(halves[:n], wide, bits)
        np.testing.assert_array_equal(wide, halves[:n].astype(np.float32))
    rng = np.random.default_rng(11)
    ties = (np.arange(1, 2049, dtype=np.float32) + 0.5) * np.float32(2.0 ** -10)  # halfway between float16s
    floats = np.concatenate([rng.standard_normal(20_000).astype(np.float32) * s for s in (1e-7, 1e-5, 1.0, 6e4)] +
                            [ties, np.array([65504, 65519.99, 65520, -np.inf, np.nan, -0.0], np.float32)])
    with np.errstate(over="ignore"):
        want = floats.astype(np.float16)
    for n in (floats.size, floats.size - 3):
        got = np.zeros(n, np.float16)
        module.half_convert(floats[:n], got, bits)
        np.testing.assert_array_equal(got.view(np.uint16), want[:n].view(np.uint16))
    with pytest.raises(TypeError, match="float16 -> float32 or float32 -> float16"):
        module.half_convert(floats, np.zeros(floats.size, np.float64), bits)
    with pytest.raises(ValueError, match="differ in size"):
        module.half_convert(floats, np.zeros(3, np.float16), bits)


def test_the_c_conversion_comes_back_after_the_kernels_were_disabled_first(monkeypatch):
    """A first conversion with MSTRAIN_DISABLE_KERNELS set takes numpy's path without settling it:
    once the switch is off, the extension converts again."""
    from mstrain.kernels import half
    if half._half_convert() is None:
        pytest.skip("thin_gemm extension not built or no F16C")
    monkeypatch.setattr(half, "_extension", [])
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    x = np.arange(2048, dtype=np.float32)
    np.testing.assert_array_equal(half.astype(x, np.float16), x.astype(np.float16))
    assert half._half_convert() is None
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "0")
    assert half._half_convert() is not None
