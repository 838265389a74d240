"""Op-table rows for core/ops/nn_ops.py: activations (and their *_grad primitives), softmax family,
layer norm, fused losses, clipping. References are plain float64 numpy."""
import math

import numpy as np

from mstrain.ops import functional as F
from mstrain.ops import nn_ops

from .cases import away, case, integers, normal, positive

_erf = np.vectorize(math.erf)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _log_softmax(x, axis=-1):
    return np.log(_softmax(x, axis))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu_erf(x):
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _derivative(f, x, h=1e-5):
    return (f(x + h) - f(x - h)) / (2 * h)


def _layer_norm(x, gamma, beta, eps=1e-5):
    xhat = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return xhat * gamma + beta


def _normalize(x, eps=1e-5):
    rstd = 1 / np.sqrt(x.var(-1, keepdims=True) + eps)
    return (x - x.mean(-1, keepdims=True)) * rstd, rstd


def _ln_backward(xhat, rstd, gy):
    return rstd * (gy - gy.mean(-1, keepdims=True) - xhat * (gy * xhat).mean(-1, keepdims=True))


def _xent_sparse(logits, labels):
    return -np.take_along_axis(_log_softmax(logits), labels[..., None], -1)[..., 0]


def _bce(x, y):
    p = _sigmoid(x)
    return -(y * np.log(p) + (1 - y) * np.log(1 - p))


def _clip_input(rng):
    x = rng.uniform(-2, 2, (4, 5))
    return np.where(np.abs(np.abs(x) - 0.5) < 0.05, x * 1.3, x)  # keep off the clip bounds


def _probabilities(*shape):
    return lambda rng: _softmax(rng.standard_normal(shape))


CASES = [
    case(("relu", "relu_grad"), F.relu, lambda x: np.maximum(x, 0), away(4, 5)),
    case("relu_grad", nn_ops.relu_grad, lambda g, x: g * (x > 0), normal(3, 4), away(3, 4)),
    case(("leaky_relu", "leaky_relu_grad"), lambda x: F.leaky_relu(x, 0.2),
         lambda x: np.where(x > 0, x, 0.2 * x), away(4, 5)),
    case("leaky_relu_grad", lambda g, x: nn_ops.leaky_relu_grad(g, x, 0.3),
         lambda g, x: np.where(x > 0, g, 0.3 * g), normal(3, 4), away(3, 4)),
    case(("elu", "elu_grad"), lambda x: F.elu(x, 0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x)),
         away(4, 5), second_order=True),
    case("elu_grad", lambda g, x: nn_ops.elu_grad(g, x, 1.5),
         lambda g, x: g * np.where(x > 0, 1, 1.5 * np.exp(x)), normal(3, 4), away(3, 4)),
    case(("tanh", "tanh_grad"), F.tanh, np.tanh, normal(3, 5), second_order=True),
    case("tanh_grad", nn_ops.tanh_grad, lambda g, y: g * (1 - y * y), normal(3, 4), normal(3, 4)),
    case(("sigmoid", "sigmoid_grad"), F.sigmoid, _sigmoid,
         lambda rng: 3 * rng.standard_normal((3, 5)), second_order=True),
    case("sigmoid_grad", nn_ops.sigmoid_grad, lambda g, y: g * y * (1 - y), normal(3, 4), normal(3, 4)),
    case("softplus", F.softplus, lambda x: np.log1p(np.exp(x)), normal(4, 3), second_order=True),
    case(("silu", "silu_grad"), F.silu, lambda x: x * _sigmoid(x), normal(4, 3), second_order=True),
    case("silu_grad", nn_ops.silu_grad, lambda g, x: g * _derivative(lambda t: t * _sigmoid(t), x),
         normal(3, 4), normal(3, 4), rtol=1e-7, atol=1e-8),
    case("erf", F.erf, _erf, normal(4, 3), second_order=True),
    case(("gelu_tanh", "gelu_tanh_grad"), F.gelu, _gelu_tanh, normal(4, 5), second_order=True),
    case("gelu_tanh_grad", nn_ops.gelu_tanh_grad, lambda g, x: g * _derivative(_gelu_tanh, x),
         normal(3, 4), normal(3, 4), rtol=1e-7, atol=1e-8),
    case(("gelu_erf", "gelu_erf_grad"), lambda x: F.gelu(x, approximate=False), _gelu_erf, normal(4, 5),
         second_order=True),
    case("gelu_erf_grad", nn_ops.gelu_erf_grad, lambda g, x: g * _derivative(_gelu_erf, x),
         normal(3, 4), normal(3, 4), rtol=1e-7, atol=1e-8),
    case(("softmax", "softmax_grad"), F.softmax, _softmax, normal(3, 5), second_order=True),
    case(("softmax", "softmax_grad"), lambda x: F.softmax(x, 0), lambda x: _softmax(x, 0), normal(4, 3),
         name="softmax_axis0"),
    case("softmax_grad", lambda g, y: nn_ops.softmax_grad(g, y, -1),
         lambda g, y: y * (g - (g * y).sum(-1, keepdims=True)), normal(3, 4), _probabilities(3, 4)),
    case("log_softmax", F.log_softmax, _log_softmax, normal(3, 5), second_order=True),
    case(("layer_norm", "layer_norm_normalize", "layer_norm_backward"), F.layer_norm, _layer_norm,
         normal(2, 3, 6), normal(6), normal(6), second_order=True),
    case("layer_norm", lambda x: F.layer_norm(x, None, None, 1e-3),
         lambda x: _layer_norm(x, 1, 0, 1e-3), normal(4, 5), name="layer_norm_no_affine"),
    case("layer_norm_normalize", nn_ops.layer_norm_normalize, _normalize, normal(3, 5), second_order=True),
    case("layer_norm_backward", nn_ops.layer_norm_backward, _ln_backward,
         normal(3, 5), positive(3, 1), normal(3, 5), second_order=True),
    case("softmax_cross_entropy", F.softmax_cross_entropy, _xent_sparse, normal(4, 5), integers(5, 4),
         second_order=True),
    case("softmax_cross_entropy", lambda x, y: F.softmax_cross_entropy(x, y, sparse=False),
         lambda x, y: -(y * _log_softmax(x)).sum(-1), normal(2, 3, 4), _probabilities(2, 3, 4),
         name="softmax_cross_entropy_dense"),
    case("binary_cross_entropy_with_logits", F.binary_cross_entropy_with_logits, _bce,
         normal(3, 4), lambda rng: rng.random((3, 4)), second_order=True),
    case("clip_by_value", F.clip_by_value, np.clip, _clip_input, -0.5, 0.5),
    case("clip_by_value", F.clip_by_value, np.clip, _clip_input, normal(4, 1), lambda rng: np.full(5, 3.0),
         name="clip_by_value_tensor_bounds"),
]


def _layer_rows():
    """Rows for primitives other rooms of core register (mstrain.nn layers)."""
    from mstrain.nn import _primitives as layers
    return [
        case("dense", layers.dense, lambda x, w, b: x @ w.T + b, normal(4, 3), normal(5, 3), normal(5),
             second_order=True),
        case("dense_no_bias", layers.dense_no_bias, lambda x, w: x @ w.T, normal(4, 3), normal(5, 3)),
        case("dense_weight_grad", layers.dense_weight_grad, lambda g, x: g.T @ x, normal(4, 5), normal(4, 3),
             second_order=True),
    ]


CASES += _layer_rows()


def _attention_ref(q, k, v, bias=None, causal=False, visible=None):
    """softmax(q k^T / sqrt(D) + bias) v in float64, the masked keys left out of the softmax."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    t, s = scores.shape[-2:]
    if causal:
        visible = np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)
    if visible is not None:
        scores = np.where(visible, scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


_PADDING = np.array([[True, True, True, False, False], [True, True, True, True, True]])[:, None, None, :]


def _attention_rows():
    sdpa = F.scaled_dot_product_attention
    prims = ("attention", "attention_grad")
    return [
        case(prims, lambda q, k, v, b: sdpa(q, k, v, bias=b), _attention_ref,
             normal(2, 3, 4, 5), normal(2, 3, 6, 5), normal(2, 3, 6, 2), normal(1, 3, 4, 6),
             name="attention_bias", second_order=True),
        case(prims, lambda q, k, v, b: sdpa(q, k, v, bias=b, is_causal=True),
             lambda q, k, v, b: _attention_ref(q, k, v, b, causal=True),
             normal(2, 2, 3, 4), normal(2, 2, 5, 4), normal(2, 2, 5, 3), normal(2, 1, 3, 5),
             name="attention_causal_cache", second_order=True),
        case(prims, lambda q, k, v: sdpa(q, k, v, is_causal=True, input_layout="BSND"),
             lambda q, k, v: np.swapaxes(_attention_ref(*(np.swapaxes(a, 1, 2) for a in (q, k, v)), causal=True), 1, 2),
             normal(2, 4, 3, 2), normal(2, 4, 3, 2), normal(2, 4, 3, 3), name="attention_bsnd", second_order=True),
        case(prims, lambda q, k, v: sdpa(q, k, v, attn_mask=_PADDING),
             lambda q, k, v: _attention_ref(q, k, v, visible=_PADDING),
             normal(2, 2, 4, 3), normal(2, 2, 5, 3), normal(2, 2, 5, 3), name="attention_padding_mask"),
        case(("attention_qkvpacked", "attention_qkvpacked_grad"),
             lambda x, b: F.scaled_dot_product_attention_qkvpacked(x, bias=b, is_causal=True),
             lambda x, b: np.swapaxes(_attention_ref(*(np.swapaxes(x[:, :, i], 1, 2) for i in range(3)), b,
                                                     causal=True), 1, 2),
             normal(2, 4, 3, 2, 3), normal(1, 2, 4, 4), name="attention_qkvpacked", second_order=True),
    ]


CASES += _attention_rows()
