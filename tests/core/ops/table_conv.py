"""Op-table rows for core/ops/conv.py: convolution (and its two adjoints), max and average pooling,
training-mode batch norm (and state_ops.depend).
References are direct loops over output positions in float64 (no im2col), so they check the
strided-window arithmetic independently."""
import numpy as np

from mstrain.ops import conv, state_ops

from .cases import case, normal

GEOMETRY = dict(stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=2)
X_SHAPE, W_SHAPE = (2, 4, 6, 5), (4, 2, 3, 2)


def _padded(x, padding):
    top, bottom, left, right = padding
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))


def _conv_ref(x, w, stride, padding, dilation, groups):
    xp = _padded(x, padding)
    n, c, h, wd = xp.shape
    o, cg, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    for f in range(o):
        g = f // (o // groups)
        for i in range(oh):
            for j in range(ow):
                rows = i * stride[0] + dilation[0] * np.arange(kh)
                cols = j * stride[1] + dilation[1] * np.arange(kw)
                patch = xp[:, g * cg:(g + 1) * cg][:, :, rows][:, :, :, cols]
                out[:, f, i, j] = (patch * w[f]).sum(axis=(1, 2, 3))
    return out


def _conv_input_adjoint_ref(g, w, x_shape, stride, padding, dilation, groups):
    """The transpose of the conv map x -> conv(x, w), built column by column."""
    size = int(np.prod(x_shape))
    columns = [_conv_ref(np.eye(size)[k].reshape(x_shape), w, stride, padding, dilation, groups).ravel()
               for k in range(size)]
    return (np.stack(columns, axis=1).T @ g.ravel()).reshape(x_shape)


def _conv_filter_adjoint_ref(x, g, w_shape, stride, padding, dilation, groups):
    size = int(np.prod(w_shape))
    columns = [_conv_ref(x, np.eye(size)[k].reshape(w_shape), stride, padding, dilation, groups).ravel()
               for k in range(size)]
    return (np.stack(columns, axis=1).T @ g.ravel()).reshape(w_shape)


def _out_shape():
    return _conv_ref(np.zeros(X_SHAPE), np.zeros(W_SHAPE), **GEOMETRY).shape


def _pool_ref(x, kernel, stride, padding, reduce, fill):
    top, bottom, left, right = padding
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    oh = (xp.shape[2] - kernel[0]) // stride[0] + 1
    ow = (xp.shape[3] - kernel[1]) // stride[1] + 1
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            window = xp[:, :, i * stride[0]:i * stride[0] + kernel[0], j * stride[1]:j * stride[1] + kernel[1]]
            out[:, :, i, j] = reduce(window)
    return out


POOL = dict(kernel=(3, 2), stride=(2, 2), padding=(1, 1, 0, 1))
P_SHAPE = (2, 3, 5, 6)


def _max_ref(x):
    return _pool_ref(x, POOL["kernel"], POOL["stride"], POOL["padding"], lambda w: w.max(axis=(2, 3)), -np.inf)


def _max_grad_ref(x, g):
    """g routed to each window's maximum, by perturbing one input at a time."""
    out = np.zeros_like(x)
    base = _max_ref(x)
    flat = out.reshape(-1)
    for k in range(x.size):
        bumped = x.copy().reshape(-1)
        bumped[k] += 1e-3
        flat[k] = (((_max_ref(bumped.reshape(x.shape)) - base) / 1e-3) * g).sum()
    return out


def _avg_ref(x, count_include_pad):
    window_sum = _pool_ref(x, POOL["kernel"], POOL["stride"], POOL["padding"], lambda w: w.sum(axis=(2, 3)), 0.0)
    if count_include_pad:
        return window_sum / (POOL["kernel"][0] * POOL["kernel"][1])
    counts = _pool_ref(np.ones_like(x), POOL["kernel"], POOL["stride"], POOL["padding"],
                       lambda w: w.sum(axis=(2, 3)), 0.0)
    return window_sum / counts


def _distinct(*shape):
    """A permutation of well-separated values: no ties inside any pooling window."""
    return lambda rng: rng.permutation(np.arange(np.prod(shape), dtype=np.float64)).reshape(shape) * 0.1


def _batch_norm_train(x, gamma, beta):
    """Fresh running statistics on every call (the op moves them in place; the row checks y)."""
    return conv.batch_norm_train(x, gamma, beta, np.zeros(2), np.ones(2), eps=1e-3, momentum=0.9)


def _batch_norm_ref(x, gamma, beta):
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = ((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-3) * gamma[None, :, None, None] + beta[None, :, None, None]


CASES = [
    case(("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"),
         lambda x, w: conv.conv2d(x, w, **GEOMETRY), lambda x, w: _conv_ref(x, w, **GEOMETRY),
         normal(*X_SHAPE), normal(*W_SHAPE), second_order=True),
    case("conv2d_backprop_input",
         lambda g, w: conv.conv2d_backprop_input(g, w, X_SHAPE, **GEOMETRY),
         lambda g, w: _conv_input_adjoint_ref(g, w, X_SHAPE, **GEOMETRY),
         lambda rng: rng.standard_normal(_out_shape()), normal(*W_SHAPE), second_order=True),
    case("conv2d_backprop_filter",
         lambda x, g: conv.conv2d_backprop_filter(x, g, W_SHAPE, **GEOMETRY),
         lambda x, g: _conv_filter_adjoint_ref(x, g, W_SHAPE, **GEOMETRY),
         normal(*X_SHAPE), lambda rng: rng.standard_normal(_out_shape()), second_order=True),
    case(("max_pool2d", "max_pool2d_grad"), lambda x: conv.max_pool2d(x, **POOL), _max_ref, _distinct(*P_SHAPE)),
    case(("max_pool2d_grad", "max_pool2d_select"), lambda x, g: conv.max_pool2d_grad(x, g, **POOL), _max_grad_ref,
         _distinct(*P_SHAPE), lambda rng: rng.standard_normal(_max_ref(np.zeros(P_SHAPE)).shape),
         name="max_pool2d_grad", second_order=True),
    case("max_pool2d_select", lambda x, v: conv.max_pool2d_select(x, v, **POOL),
         lambda x, v: _select_ref(x, v),
         _distinct(*P_SHAPE), normal(*P_SHAPE)),
    case(("avg_pool2d", "avg_pool2d_grad"), lambda x: conv.avg_pool2d(x, count_include_pad=True, **POOL),
         lambda x: _avg_ref(x, True), normal(*P_SHAPE), second_order=True),
    case(("avg_pool2d", "avg_pool2d_grad"), lambda x: conv.avg_pool2d(x, count_include_pad=False, **POOL),
         lambda x: _avg_ref(x, False), normal(*P_SHAPE), name="avg_pool2d_exclude_pad"),
    case("depend", state_ops.depend, lambda v, e: v, normal(3, 2), normal(4), second_order=True),
    case("avg_pool2d_grad", lambda g: conv.avg_pool2d_grad(g, P_SHAPE, count_include_pad=False, **POOL),
         lambda g: _avg_adjoint_ref(g), lambda rng: rng.standard_normal(_avg_ref(np.zeros(P_SHAPE), True).shape)),
    case("batch_norm_train", _batch_norm_train, _batch_norm_ref, normal(3, 2, 4, 3), normal(2), normal(2),
         second_order=True),
]


def _select_ref(x, values):
    """values read at each window's argmax of x, found by a direct search."""
    top, bottom, left, right = POOL["padding"]
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=-np.inf)
    vp = np.pad(values, ((0, 0), (0, 0), (top, bottom), (left, right)))
    out = np.zeros(_max_ref(x).shape)
    kh, kw = POOL["kernel"]
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            for i in range(out.shape[2]):
                for j in range(out.shape[3]):
                    r0, c0 = i * POOL["stride"][0], j * POOL["stride"][1]
                    window = xp[n, c, r0:r0 + kh, c0:c0 + kw]
                    a, b = np.unravel_index(window.argmax(), window.shape)
                    out[n, c, i, j] = vp[n, c, r0 + a, c0 + b]
    return out


def _avg_adjoint_ref(g):
    size = int(np.prod(P_SHAPE))
    columns = [_avg_ref(np.eye(size)[k].reshape(P_SHAPE), False).ravel() for k in range(size)]
    return (np.stack(columns, axis=1).T @ g.ravel()).reshape(P_SHAPE)
