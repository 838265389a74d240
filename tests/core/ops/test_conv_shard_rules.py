"""The sharding rules of the convolution and pooling primitives: every dimension a rule lets split,
split two ways, run block by block with the rule's local attributes and put back together
(concatenated, or summed where the rule says the split gives partial sums), equals the whole op."""
import numpy as np
import pytest

from mstrain.ops import conv as C
from mstrain.parallel.spmd.rules import spec_for

rng = np.random.default_rng(0)
GEOMETRY = dict(stride=(2, 1), padding=(1, 0, 1, 1), dilation=(1, 1))
POOL = dict(kernel=(3, 2), stride=(2, 2), padding=(1, 0, 0, 1))


def _cases():
    x = rng.standard_normal((4, 4, 7, 6))
    for groups in (1, 2):
        w = rng.standard_normal((6, 4 // groups, 3, 2))
        attrs = dict(GEOMETRY, groups=groups)
        out = C.conv2d.impl(x, w, **attrs)
        g = rng.standard_normal(out.shape)
        yield f"conv2d-g{groups}", C.conv2d, (x, w), attrs
        yield f"backprop_input-g{groups}", C.conv2d_backprop_input, (g, w), dict(attrs, input_shape=x.shape)
        yield f"backprop_filter-g{groups}", C.conv2d_backprop_filter, (x, g), dict(attrs, filter_shape=w.shape)
    pooled = C.max_pool2d.impl(x, **POOL)
    gp = rng.standard_normal(pooled.shape)
    yield "max_pool2d", C.max_pool2d, (x,), POOL
    yield "max_pool2d_grad", C.max_pool2d_grad, (x, gp), POOL
    yield "max_pool2d_select", C.max_pool2d_select, (x, rng.standard_normal(x.shape)), POOL
    avg = dict(POOL, count_include_pad=False)
    yield "avg_pool2d", C.avg_pool2d, (x,), avg
    yield "avg_pool2d_grad", C.avg_pool2d_grad, (gp,), dict(avg, input_shape=x.shape)


CASES = list(_cases())


def _blocks(array, dims, d, parts):
    """The `parts` blocks of `array` along the tensor axis that runs over iteration dim d (or it whole)."""
    if d not in dims:
        return [array] * parts
    return np.split(array, parts, axis=dims.index(d))


@pytest.mark.parametrize("name,prim,inputs,attrs", CASES, ids=[c[0] for c in CASES])
def test_every_splittable_dimension_reassembles_the_whole_op(name, prim, inputs, attrs):
    spec = spec_for(prim, [x.shape for x in inputs], attrs)
    whole = prim.impl(*inputs, **attrs)
    assert whole.shape == spec.output_shape()
    splittable = [d for d, size in enumerate(spec.iter_sizes) if d not in spec.fixed and size % 2 == 0]
    assert splittable, name
    out_dims = spec.out_dims[0]
    for d in splittable:
        pieces = list(zip(*[_blocks(x, dims, d, 2) for x, dims in zip(inputs, spec.in_dims)]))
        local_shape = tuple(s // 2 if dim == d else s for s, dim in zip(whole.shape, out_dims))
        local_attrs = attrs if spec.local_attrs is None else spec.local_attrs(attrs, (local_shape,))
        results = [prim.impl(*piece, **local_attrs) for piece in pieces]
        assert all(r.shape == local_shape for r in results), (name, d)
        joined = sum(results) if d in spec.reduced else np.concatenate(results, axis=out_dims.index(d))
        np.testing.assert_allclose(joined, whole, rtol=1e-10, atol=1e-10, err_msg=f"{name}: split of dim {d}")


def test_batch_and_output_channels_split_and_windows_do_not():
    x, w = (4, 4, 7, 6), (6, 4, 3, 2)
    spec = spec_for(C.conv2d, [x, w], dict(GEOMETRY, groups=1))
    n, o, c = 0, 1, 2
    assert {n, o, c}.isdisjoint(spec.fixed) and spec.reduced == {c}
    assert all(d in spec.fixed for d in spec.out_dims[0][2:])  # output rows and columns
    grouped = spec_for(C.conv2d, [x, (6, 2, 3, 2)], dict(GEOMETRY, groups=2))
    assert {o, c} <= grouped.fixed and n not in grouped.fixed
