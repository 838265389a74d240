"""kernels.gemm_panel: the packed GEMM (every instruction set this machine runs) against numpy's
matmul, the same bits on 1, 2 and 3 threads, and the rule that picks it for a compiled step."""
import numpy as np
import pytest

from mstrain.kernels import gemm_panel, native_module

built = pytest.mark.skipif(not gemm_panel.isas(), reason="the gemm_panel extension is not built")

# (m, n, k): whole tiles; ragged rows, columns and depth (edge tiles, a depth past one 128 block);
# fewer columns than a tile; a long depth (a weight gradient); a 16-deep patch embedding
SHAPES = [(96, 64, 128), (131, 45, 300), (200, 16, 40), (40, 96, 1000), (150, 128, 16)]
# weight gradients g.T @ x: ragged rows/columns, a depth not a whole number of chunks or blocks, one
# chunk (shallow), many chunks; g's rows over 2 KiB apart (A packed: 600 rows of float32/float64)
WGRAD_SHAPES = [(131, 45, 1300), (128, 128, 3200), (7, 300, 600), (200, 16, 40), (96, 64, 5000),
                (600, 40, 1100)]


def _operands(m, n, k, trans_a, trans_b, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (n, k) if trans_b else (k, n)).astype(dtype)
    return (a.T if trans_a else a), (b.T if trans_b else b)


def _assert_close(got, a, b):
    """Within 1e-5 (float32) of numpy's product relative to the largest term magnitude."""
    want = np.matmul(a, b)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    tol = 1e-5 if a.dtype == np.float32 else 1e-12
    assert np.all(np.abs(got.astype(np.float64) - want) <= tol * scale + tol), np.abs(got - want).max()


# the products of each path: (function, shapes, (trans_a, trans_b) layouts, threads, operand seed); the
# weight-gradient path's first layout is the step's (g read transposed, x row-major)
PATHS = {
    "gemm": (gemm_panel.matmul, SHAPES, [(0, 0), (0, 1), (1, 0), (1, 1)], 1, 0),
    "weight_grad": (gemm_panel.weight_grad_matmul, WGRAD_SHAPES, [(1, 0), (0, 0), (1, 1)], 2, 4),
}
# the same bits on any thread count: (function, (trans_a, shape) cases, thread counts, operand seed)
THREAD_CASES = {
    "gemm": (gemm_panel.matmul, [(0, (700, 96, 130)), (1, (96, 260, 700)), (0, (37, 200, 64)),
                                 (1, (128, 128, 300))], (2, 3), 1),
    "weight_grad": (gemm_panel.weight_grad_matmul, [(1, shape) for shape in WGRAD_SHAPES], (2, 3, 5), 5),
}


@built
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("path,trans_a,trans_b",
                         [(path, *layout) for path, (_, _, layouts, _, _) in PATHS.items() for layout in layouts])
def test_every_instruction_set_matches_numpy(dtype, path, trans_a, trans_b):
    product, shapes, _, threads, seed = PATHS[path]
    for isa in gemm_panel.isas():
        for m, n, k in shapes:
            a, b = _operands(m, n, k, trans_a, trans_b, dtype, seed=seed)
            out = np.full((m, n), np.nan, dtype)
            product(a, b, out=out, isa=isa, threads=threads)
            _assert_close(out, a, b)


@built
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("path", list(THREAD_CASES))
def test_threads_give_the_same_bits(dtype, path):
    """gemm: threads own bands of whole tiles; every element is one chain of multiply-adds in k order.
    A 128 x 128 weight gradient is cut by columns on 2 threads (4 tile columns split evenly, 11 tile
    rows would not) and by rows on 3. weight_grad: the depth chunks are fixed by the shape alone; more
    threads than chunks cut a chunk's rows."""
    product, cases, thread_counts, seed = THREAD_CASES[path]
    for trans_a, (m, n, k) in cases:
        a, b = _operands(m, n, k, trans_a, 0, dtype, seed=seed)
        one = product(a, b, threads=1)
        for threads in thread_counts:
            np.testing.assert_array_equal(product(a, b, threads=threads), one)


@built
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_bias_row_gives_the_bits_of_the_product_then_the_add(dtype):
    """The bias is added to each tile's finished sums at its store: the same one rounding as adding it
    after the product, on every instruction set and thread count (a ragged column tile and a depth of
    several blocks included), and numpy's product plus the bias within rounding."""
    for m, n, k in [(3200, 128, 128), (131, 45, 300), (96, 64, 16)]:
        a, b = _operands(m, n, k, 0, 1, dtype, seed=4)
        bias = np.random.default_rng(5).uniform(-1, 1, n).astype(dtype)
        for isa in gemm_panel.isas():
            for threads in (1, 2):
                two_pass = gemm_panel.matmul(a, b, isa=isa, threads=threads)
                two_pass += bias
                got = gemm_panel.matmul(a, b, isa=isa, threads=threads, bias=bias)
                np.testing.assert_array_equal(got, two_pass)
        _assert_close(got - bias, a, b)
        np.testing.assert_allclose(got, a @ b + bias, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-4)


def test_a_bias_the_kernel_does_not_take_is_added_after_numpys_product():
    a, b = _operands(130, 40, 20, 0, 0, np.float32)
    strided = np.arange(80, dtype=np.float32)[::2]
    np.testing.assert_array_equal(gemm_panel.matmul(a, b, bias=strided), a @ b + strided)


@built
def test_the_vector_versions_give_the_same_bits():
    """AVX-512 and AVX2 both fuse each multiply-add: the same numbers on either kind of machine."""
    fused = [isa for isa in gemm_panel.isas() if isa != "portable"]
    if len(fused) < 2:
        pytest.skip("this CPU runs one vector version")
    a, b = _operands(150, 72, 300, 0, 1, np.float32, seed=2)
    results = [gemm_panel.matmul(a, b, isa=isa) for isa in fused]
    for other in results[1:]:
        np.testing.assert_array_equal(other, results[0])


@built
def test_an_unknown_instruction_set_is_refused():
    a, b = _operands(8, 8, 8, 0, 0, np.float32)
    with pytest.raises(ValueError, match="not supported"):
        gemm_panel.matmul(a, b, isa="avx9000")


def test_operands_the_kernel_does_not_take_get_numpys_product():
    rng = np.random.default_rng(3)
    batched, ints = rng.normal(size=(2, 5, 4)), np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(gemm_panel.matmul(batched, np.ones((4, 3))), batched @ np.ones((4, 3)))
    np.testing.assert_array_equal(gemm_panel.matmul(ints, ints.T), ints @ ints.T)


def test_without_the_extension_the_reference_runs(monkeypatch):
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    assert gemm_panel.c_entry() is None and not gemm_panel.chooses(3200, 128, 128, np.float32)
    a, b = _operands(130, 40, 20, 0, 0, np.float32)
    np.testing.assert_array_equal(gemm_panel.matmul(a, b), a @ b)


@built
def test_the_rule_takes_transformer_products_only():
    f32 = np.float32
    vit = [(3200, 128, 128), (3200, 256, 128), (3200, 128, 256), (128, 128, 3200), (128, 256, 3200),
           (256, 128, 3200), (3136, 128, 16)]
    assert all(gemm_panel.chooses(m, n, k, f32) for m, n, k in vit)
    assert gemm_panel.chooses(128, 256, 3200, np.float64)
    assert not gemm_panel.chooses(32, 128, 784, f32)                 # a small batch: numpy's BLAS
    assert not gemm_panel.chooses(128, 16, 3136, f32)                # narrower than one tile
    assert not gemm_panel.chooses(2048, 72, 256, f32)                # a ragged edge tile
    assert not gemm_panel.chooses(3200, 128, 8, f32)                 # too shallow
    assert not gemm_panel.chooses(2048, 256, 256, f32)               # GPT's widths: OpenBLAS
    assert not gemm_panel.chooses(768, 256, 2048, f32)
    assert not gemm_panel.chooses(3200, 128, 128, np.float16)


_SUBPROCESS = """
import mstrain, sys, hashlib
import numpy as np
from mstrain.kernels import gemm_panel
rng = np.random.default_rng(6)
g, x = rng.uniform(-1, 1, (3200, 128)).astype(np.float32), rng.uniform(-1, 1, (3200, 96)).astype(np.float32)
sys.stdout.write(hashlib.sha256(gemm_panel.weight_grad_matmul(g.T, x).tobytes()).hexdigest())
"""


@built
def test_one_and_two_thread_processes_give_the_same_bits():
    """The default thread count (all OpenMP threads, as the compiled step runs it) in fresh processes."""
    import os
    import subprocess
    import sys
    digests = []
    for threads in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        done = subprocess.run([sys.executable, "-c", _SUBPROCESS], env=env, capture_output=True, text=True,
                              timeout=120, check=True)
        digests.append(done.stdout)
    assert len(digests[0]) == 64 and digests[0] == digests[1]


@built
def test_the_weight_gradient_rule():
    f32 = np.float32
    wgrads = [(128, 128, 3200), (256, 128, 3200), (128, 256, 3200), (384, 128, 3200), (256, 256, 2048)]
    assert all(gemm_panel.chooses_weight_grad(m, n, k, f32) for m, n, k in wgrads)
    assert not any(gemm_panel.chooses_weight_grad(m, n, k, f32)           # W1's wide ones: OpenBLAS
                   for m, n, k in [(1024, 256, 2048), (256, 1024, 2048), (768, 256, 2048)])
    assert gemm_panel.chooses_weight_grad(128, 128, 3200, np.float64)
    assert not gemm_panel.chooses_weight_grad(3200, 128, 128, f32)      # a forward product: not deep
    assert not gemm_panel.chooses_weight_grad(1024, 1024, 1024, f32)    # square: cut by C
    assert not gemm_panel.chooses_weight_grad(128, 72, 3200, f32)       # a ragged edge tile
    assert not gemm_panel.chooses_weight_grad(64, 128, 3200, f32)       # few rows
    assert not gemm_panel.chooses_weight_grad(128, 128, 3200, np.float16)


@built
def test_a_wide_weight_gradient_takes_fewer_chunks():
    """1500 x 1408 outputs: the 2100-deep product's four chunks of partials are capped at two (16 MiB);
    a narrow C of the same depth keeps four, a short depth one."""
    depth_chunks = native_module("mstrain", "gemm_panel").weight_grad_depth_chunks
    assert depth_chunks(1500, 1408, 2100) == 2
    assert depth_chunks(128, 128, 2100) == 4 and depth_chunks(128, 128, 3200) == 4
    assert depth_chunks(1024, 1024, 8192) == 4 and depth_chunks(128, 128, 8192) == 8
    assert depth_chunks(128, 128, 511) == 1
    a, b = _operands(1500, 1408, 2100, 1, 0, np.float32, seed=7)
    one = gemm_panel.weight_grad_matmul(a, b, threads=1)
    _assert_close(one, a, b)
    np.testing.assert_array_equal(gemm_panel.weight_grad_matmul(a, b, threads=2), one)
