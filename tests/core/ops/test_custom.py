"""ops.Custom: hybrid (loop DSL -> C++), aot (C++ with MindSpore's ABI) and pyfunc ops against
numpy references, in eager mode, under autodiff with a bprop, and inside a compiled training step."""
import textwrap

import numpy as np
import pytest

import mstrain as ms
from mstrain import nn, ops
from mstrain import dataset as ds
from mstrain.graph import build

pytestmark = pytest.mark.skipif(not build.compiler_available(), reason="no C++ compiler for hybrid/aot ops")
RNG = np.random.default_rng(0)


def masked_affine(a, b):
    out = output_tensor(a.shape, a.dtype)  # noqa: F821  (the DSL's allocation)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            doubled = a[i, j] * 2.0
            out[i, j] = doubled + b[j] if a[i, j] > 0 else -b[j]
    return out


def row_sums(x):
    total = output_tensor((x.shape[0],), x.dtype)  # noqa: F821
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            total[i] += x[i, j]
    return total


def scaled(x, w):
    out = output_tensor(x.shape, x.dtype)  # noqa: F821
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = x[i, j] * w[j] + tanh(x[i, j])  # noqa: F821  (DSL math function)
    return out


def test_hybrid_ops_equal_numpy_for_any_size():
    affine = ops.Custom(masked_affine)
    for rows in (3, 7):  # one compile serves both sizes (specialised on rank and dtype only)
        a = RNG.standard_normal((rows, 4)).astype(np.float32)
        b = np.arange(4, dtype=np.float32)
        np.testing.assert_allclose(affine(ms.Tensor(a), ms.Tensor(b)).asnumpy(), np.where(a > 0, 2 * a + b, -b),
                                   rtol=1e-6)
    x = RNG.standard_normal((5, 6))
    np.testing.assert_allclose(ops.Custom(row_sums)(ms.Tensor(x)).asnumpy(), x.sum(1), rtol=1e-12)


def test_aot_op_with_mindspore_abi(tmp_path):
    source = tmp_path / "scale.cpp"
    source.write_text(textwrap.dedent("""
        #include <cstdint>
        extern "C" int CustomScale(int nparam, void** params, int* ndims, int64_t** shapes,
                                   const char** dtypes, void* stream, void* extra) {
            float* x = static_cast<float*>(params[0]);
            float* out = static_cast<float*>(params[1]);
            int64_t size = 1;
            for (int k = 0; k < ndims[0]; ++k) size *= shapes[0][k];
            for (int64_t i = 0; i < size; ++i) out[i] = 3.0f * x[i] + 1.0f;
            return 0;
        }
    """))
    op = ops.Custom(f"{source}:CustomScale", out_shape=lambda s: s, out_dtype=lambda t: t, func_type="aot")
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(op(ms.Tensor(x)).asnumpy(), 3 * x + 1, rtol=1e-6)
    with pytest.raises(ops.CustomOpError, match="no symbol 'Missing'"):
        ops.Custom(f"{source}:Missing", out_shape=lambda s: s, out_dtype=lambda t: t, func_type="aot")


def test_bprop_makes_the_op_differentiable_and_its_absence_is_named():
    op = ops.Custom(scaled, bprop=lambda x, w, out, dout: (dout * (w + 1 - ops.tanh(x) ** 2),
                                                            ops.sum(dout * x, 0)))
    x, w = RNG.standard_normal((3, 4)), RNG.standard_normal(4)
    gx, gw = ms.grad(lambda a, b: ops.sum(op(a, b) ** 2), grad_position=(0, 1))(ms.Tensor(x), ms.Tensor(w))
    y = x * w + np.tanh(x)
    np.testing.assert_allclose(gx.asnumpy(), 2 * y * (w + 1 - np.tanh(x) ** 2), rtol=1e-10)
    np.testing.assert_allclose(gw.asnumpy(), (2 * y * x).sum(0), rtol=1e-10)
    plain = ops.Custom(scaled)
    with pytest.raises(ops.CustomOpError, match=f"{plain.name} has no bprop"):
        ms.grad(lambda a: ops.sum(plain(a, ms.Tensor(w))))(ms.Tensor(x))


def test_dsl_errors_name_the_users_line():
    def uses_a_list(x):
        out = output_tensor(x.shape, x.dtype)  # noqa: F821
        values = [1, 2]
        out[0] = values[0]
        return out

    with pytest.raises(ops.HybridSyntaxError, match=r"test_custom.py:\d+: hybrid function uses_a_list: List"):
        ops.Custom(uses_a_list)(ms.Tensor(np.zeros(3)))
    with pytest.raises(ops.CustomOpError, match="func_type"):
        ops.Custom(row_sums, func_type="akg")


class _ScaledNet(nn.Cell):
    def __init__(self, scale_op):
        super().__init__()
        self.dense = nn.Dense(4, 4)
        self.w = ms.Parameter(ms.Tensor(np.linspace(0.5, 1.5, 4).astype(np.float32)), name="w")
        self.scale_op = scale_op

    def construct(self, x):
        return self.scale_op(self.dense(x), self.w)


def _train(scale_op, sink):
    ms.set_seed(0)
    net = _ScaledNet(scale_op)
    x = np.random.default_rng(5).standard_normal((32, 4)).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "y": (x[:, ::-1] * 0.5).copy()}, shuffle=False).batch(8)
    model = ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.05))
    return model.train(3, data, dataset_sink_mode=sink, sink_size=4 if sink else -1).step_loss


def test_hybrid_op_trains_in_a_loop_sunk_step_like_the_reference_op():
    bprop = lambda x, w, out, dout: (dout * (w + 1 - ops.tanh(x) ** 2), ops.sum(dout * x, 0))  # noqa: E731
    reference = lambda x, w: x * w + ops.tanh(x)  # noqa: E731
    expected = _train(reference, sink=False)
    sunk = _train(ops.Custom(scaled, bprop=bprop), sink=True)
    assert len(sunk) == len(expected) == 12
    np.testing.assert_allclose(sunk, expected, rtol=1e-5)
    assert expected[-1] < expected[0]


def test_pyfunc_op_and_its_name_in_the_traced_graph():
    op = ops.Custom(lambda x: np.sort(x, axis=-1), out_shape=lambda s: s, out_dtype=lambda t: t,
                    func_type="pyfunc")
    x = RNG.standard_normal((2, 5))
    np.testing.assert_array_equal(op(ms.Tensor(x)).asnumpy(), np.sort(x, -1))
    from mstrain.graph.trace import Tracer, tracing
    tracer = Tracer("custom")
    with tracing(tracer):
        out = op(tracer.add_input(ms.Tensor(x)))
        graph = tracer.finish([tracer.output_node(out)])
    assert op.name in str(graph)
