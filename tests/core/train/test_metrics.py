"""Each metric against a direct numpy reference (loops / pairwise definitions)."""
import numpy as np
import pytest

from mstrain.tensor import Tensor
from mstrain.train import metrics as M

RNG = np.random.default_rng(0)


def _batches(*arrays, size=7):
    n = len(arrays[0])
    return [tuple(a[i:i + size] for a in arrays) for i in range(0, n, size)]


def _feed(metric, *arrays, tensors=False):
    metric.clear()
    for batch in _batches(*arrays):
        metric.update(*(Tensor(b) if tensors else b for b in batch))
    return metric.eval()


def test_accuracy_classification_index_and_one_hot_labels():
    logits = RNG.standard_normal((30, 4)).astype(np.float32)
    labels = RNG.integers(0, 4, 30)
    expected = sum(int(np.argmax(logits[i]) == labels[i]) for i in range(30)) / 30
    assert _feed(M.Accuracy(), logits, labels, tensors=True) == pytest.approx(expected)
    assert _feed(M.Accuracy(), logits, np.eye(4)[labels]) == pytest.approx(expected)


def test_accuracy_multilabel_counts_whole_rows():
    probs = RNG.random((25, 3))
    labels = (RNG.random((25, 3)) > 0.5).astype(np.float32)
    expected = np.mean([all((probs[i] >= 0.5) == (labels[i] == 1)) for i in range(25)])
    assert _feed(M.Accuracy("multilabel"), probs, labels) == pytest.approx(expected)


def test_topk_accuracy_matches_counting_higher_scores():
    scores = RNG.standard_normal((40, 10))
    labels = RNG.integers(0, 10, 40)
    for k in (1, 3, 5):
        expected = np.mean([(scores[i] > scores[i, labels[i]]).sum() < k for i in range(40)])
        assert _feed(M.TopKCategoricalAccuracy(k), scores, labels) == pytest.approx(expected)
    assert _feed(M.Top5CategoricalAccuracy(), scores, labels) == _feed(M.TopKCategoricalAccuracy(5), scores, labels)
    assert _feed(M.Top1CategoricalAccuracy(), scores, labels) == _feed(M.Accuracy(), scores, labels)


def test_loss_is_the_mean_of_batch_means():
    losses = [RNG.random(5) for _ in range(4)] + [np.float32(2.5)]
    metric = M.Loss()
    for loss in losses:
        metric.update(loss)
    assert metric.eval() == pytest.approx(np.mean([np.mean(l) for l in losses]))


def test_mae_and_mse_divide_by_the_number_of_samples():
    pred, true = RNG.standard_normal((20, 2)), RNG.standard_normal((20, 2))
    assert _feed(M.MAE(), pred, true) == pytest.approx(np.abs(pred - true).sum() / 20)
    assert _feed(M.MSE(), pred, true) == pytest.approx(((pred - true) ** 2).sum() / 20)


def _pairwise_auc(scores, labels):
    """P(score of a random positive > score of a random negative), ties counting 1/2."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_auc_equals_the_pairwise_definition_with_ties():
    scores = np.round(RNG.random(60), 1)  # rounding creates many ties
    labels = (RNG.random(60) < 0.4).astype(np.int64)
    assert _feed(M.AUC(), scores, labels) == pytest.approx(_pairwise_auc(scores, labels), abs=1e-12)
    two_column = np.stack([1 - scores, scores], axis=1)
    assert _feed(M.AUC(), two_column, labels) == pytest.approx(_pairwise_auc(scores, labels), abs=1e-12)


def test_auc_extremes_and_single_class_error():
    labels = np.array([0, 0, 1, 1])
    assert M.AUC()(np.array([0.1, 0.2, 0.8, 0.9]), labels) == 1.0
    assert M.AUC()(np.array([0.9, 0.8, 0.2, 0.1]), labels) == 0.0
    with pytest.raises(RuntimeError, match="one class"):
        M.AUC()(np.array([0.1, 0.2]), np.array([1, 1]))


def _per_class_reference(pred, true, n):
    tp = np.array([np.sum((pred == c) & (true == c)) for c in range(n)], dtype=float)
    predicted = np.array([np.sum(pred == c) for c in range(n)], dtype=float)
    actual = np.array([np.sum(true == c) for c in range(n)], dtype=float)
    div = lambda a, b: np.array([x / y if y else 0.0 for x, y in zip(a, b)])  # noqa: E731
    return div(tp, predicted), div(tp, actual), div(2 * tp, predicted + actual)


def test_precision_recall_f1_per_class_and_macro():
    scores = RNG.standard_normal((50, 4))
    labels = RNG.integers(0, 4, 50)
    precision, recall, f1 = _per_class_reference(scores.argmax(1), labels, 4)
    for metric, reference in ((M.Precision(), precision), (M.Recall(), recall), (M.F1(), f1)):
        _feed(metric, scores, labels)
        np.testing.assert_allclose(metric.eval(average=False), reference)
        assert metric.eval() == pytest.approx(reference.mean())


def test_confusion_matrix_counts_and_normalisations():
    scores = RNG.standard_normal((40, 3))
    labels = RNG.integers(0, 3, 40)
    expected = np.zeros((3, 3))
    for t, p in zip(labels, scores.argmax(1)):
        expected[t, p] += 1
    np.testing.assert_array_equal(_feed(M.ConfusionMatrix(3), scores, labels), expected)
    np.testing.assert_allclose(_feed(M.ConfusionMatrix(3, "target"), scores, labels),
                               expected / expected.sum(1, keepdims=True))
    np.testing.assert_allclose(_feed(M.ConfusionMatrix(3, "prediction"), scores, labels),
                               expected / expected.sum(0, keepdims=True))
    np.testing.assert_allclose(_feed(M.ConfusionMatrix(3, "all"), scores, labels), expected / 40)


def test_metric_registry_and_errors():
    chosen = M.get_metrics({"accuracy", "loss", "auc"})
    assert list(chosen) == ["accuracy", "auc", "loss"]
    assert isinstance(chosen["auc"], M.AUC)
    with pytest.raises(ValueError, match="known metrics: .*accuracy"):
        M.get_metrics({"acurracy"})
    with pytest.raises(TypeError, match="Metric instance"):
        M.get_metrics({"acc": "accuracy"})
    with pytest.raises(RuntimeError, match="no samples"):
        M.Accuracy().eval()


def test_set_indexes_selects_outputs():
    metric = M.Accuracy().set_indexes([1, 2])
    outputs = (np.float32(0.3), np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1, 1]))
    metric.update(*metric._select(outputs))
    assert metric.eval() == 0.5
