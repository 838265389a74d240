"""Losses against numpy references (values for every reduction, gradients by finite differences)."""
import numpy as np
import pytest

from mstrain import Tensor, nn
from mstrain.errors import ShapeError

from .gradcheck import check_cell_grads

RNG = np.random.default_rng(7)


def _log_softmax(x, axis=-1):
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


def _reduce(loss, reduction):
    return {"mean": np.mean, "sum": np.sum, "none": lambda a: a}[reduction](loss)


def _check_loss(loss_cell, logits, labels, expected):
    np.testing.assert_allclose(loss_cell(Tensor(logits), Tensor(labels)).asnumpy(), expected, rtol=1e-7, atol=1e-10)
    check_cell_grads(loss_cell, [logits, labels], float_positions=(0,))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_softmax_cross_entropy_sparse_and_dense(reduction):
    logits = RNG.standard_normal((6, 4))
    labels = RNG.integers(0, 4, 6).astype(np.int32)
    per_sample = -_log_softmax(logits)[np.arange(6), labels]
    _check_loss(nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction=reduction), logits, labels,
                _reduce(per_sample, reduction))
    one_hot = np.eye(4)[labels]
    _check_loss(nn.SoftmaxCrossEntropyWithLogits(reduction=reduction), logits, one_hot,
                _reduce(per_sample, reduction))


def test_softmax_cross_entropy_defaults_are_mindspores():
    loss = nn.SoftmaxCrossEntropyWithLogits()
    assert loss.sparse is False and loss.reduction == "none"
    with pytest.raises(ValueError, match="reduction"):
        nn.SoftmaxCrossEntropyWithLogits(reduction="avg")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_with_logits_weight_and_pos_weight(reduction):
    x = RNG.standard_normal((5, 3)) * 3
    y = (RNG.random((5, 3)) > 0.5).astype(np.float64)
    weight, pos_weight = RNG.random(3) + 0.5, RNG.random(3) + 0.5
    log_sig, log_one_minus = -np.log1p(np.exp(-x)), -np.log1p(np.exp(x))
    plain = -(y * log_sig + (1 - y) * log_one_minus)
    _check_loss(nn.BCEWithLogitsLoss(reduction), x, y, _reduce(plain, reduction))
    weighted = -(pos_weight * y * log_sig + (1 - y) * log_one_minus) * weight
    _check_loss(nn.BCEWithLogitsLoss(reduction, weight=weight, pos_weight=pos_weight), x, y,
                _reduce(weighted, reduction))


def test_bce_shape_mismatch_is_a_shape_error():
    with pytest.raises(ShapeError, match=r"\(2, 3\).*\(3, 2\)"):
        nn.BCEWithLogitsLoss()(Tensor(np.zeros((2, 3))), Tensor(np.zeros((3, 2))))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses(reduction):
    x, y = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    d = x - y
    _check_loss(nn.MSELoss(reduction), x, y, _reduce(d ** 2, reduction))
    _check_loss(nn.L1Loss(reduction), x, y, _reduce(np.abs(d), reduction))
    beta = 0.7
    smooth = np.where(np.abs(d) < beta, 0.5 * d ** 2 / beta, np.abs(d) - 0.5 * beta)
    _check_loss(nn.SmoothL1Loss(beta, reduction), x, y, _reduce(smooth, reduction))


def _nll_reference(logp, labels, weight, ignore_index, reduction):
    keep = labels != ignore_index
    safe = np.where(keep, labels, 0)
    w = (weight[safe] if weight is not None else np.ones(len(labels))) * keep
    loss = -logp[np.arange(len(labels)), safe] * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return loss.sum() if reduction == "sum" else loss


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_with_weights_and_ignore_index(reduction, weighted):
    logp = _log_softmax(RNG.standard_normal((7, 5)))
    labels = np.array([0, 4, 2, -100, 1, 4, 3], np.int32)
    weight = RNG.random(5) + 0.1 if weighted else None
    expected = _nll_reference(logp, labels, weight, -100, reduction)
    _check_loss(nn.NLLLoss(weight=weight, reduction=reduction), logp, labels, expected)


def _cross_entropy_reference(logits, labels, weight, eps, reduction, ignore_index=-100):
    logp = _log_softmax(logits)
    n, c = logits.shape
    w_all = np.ones(c) if weight is None else weight
    keep = labels != ignore_index
    safe = np.where(keep, labels, 0)
    w = w_all[safe] * keep
    nll = -logp[np.arange(n), safe] * w
    smooth = -(logp * w_all).sum(-1) * keep
    loss = (1 - eps) * nll + eps / c * smooth
    if reduction == "mean":
        return loss.sum() / w.sum()
    return loss.sum() if reduction == "sum" else loss


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted,smoothing", [(False, 0.0), (True, 0.0), (False, 0.2), (True, 0.1)])
def test_cross_entropy_with_class_ids(reduction, weighted, smoothing):
    logits = RNG.standard_normal((6, 4))
    labels = np.array([3, 0, -100, 1, 1, 2], np.int32)
    weight = RNG.random(4) + 0.2 if weighted else None
    cell = nn.CrossEntropyLoss(weight=weight, reduction=reduction, label_smoothing=smoothing)
    _check_loss(cell, logits, labels, _cross_entropy_reference(logits, labels, weight, smoothing, reduction))


def test_cross_entropy_with_probabilities_and_class_axis_one():
    logits = RNG.standard_normal((2, 3, 4))  # (N, C, d)
    raw = RNG.random((2, 3, 4))
    probs = raw / raw.sum(1, keepdims=True)
    weight = RNG.random(3) + 0.5
    logp = _log_softmax(logits, axis=1)
    eps = 0.1
    smoothed = probs * (1 - eps) + eps / 3
    per_sample = -(logp * weight[None, :, None] * smoothed).sum(1)
    cell = nn.CrossEntropyLoss(weight=weight, label_smoothing=eps)
    _check_loss(cell, logits, probs, per_sample.mean())
    ids = RNG.integers(0, 3, (2, 4)).astype(np.int32)
    flat_expected = _cross_entropy_reference(np.moveaxis(logits, 1, -1).reshape(-1, 3), ids.reshape(-1), None,
                                             0.0, "none")
    _check_loss(nn.CrossEntropyLoss(reduction="none"), logits, ids, flat_expected.reshape(2, 4))
