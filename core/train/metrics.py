"""Evaluation metrics (MindSpore names). A metric accumulates over batches: `clear()`, then
`update(*inputs)` once per batch, then `eval()`.

`Model(..., metrics=...)` takes a dict `{'name': Metric}` or a set/list of registered names
(`'accuracy'`, `'loss'`, `'auc'`, ...): `get_metrics` turns names into instances and lists the
known names for an unknown one.

    >>> m = Accuracy()
    >>> m.update(np.array([[0.1, 0.9], [0.8, 0.2]]), np.array([1, 1]))
    >>> m.eval()
    0.5
"""
import numpy as np

from ..tensor import Tensor

__all__ = [
    "Metric", "Accuracy", "Loss", "AUC", "TopKCategoricalAccuracy", "Top1CategoricalAccuracy",
    "Top5CategoricalAccuracy", "MAE", "MSE", "Precision", "Recall", "F1", "ConfusionMatrix",
    "get_metric", "get_metrics", "names",
]


def _as_numpy(x):
    if isinstance(x, Tensor):
        return x.asnumpy()
    if isinstance(x, (list, tuple)):
        return np.asarray([_as_numpy(v) for v in x])
    return np.asarray(x)


def _class_labels(y, num_classes):
    """Integer labels from (N,) indices or (N, C) one-hot/probability rows."""
    y = _as_numpy(y)
    if y.ndim == 2 and y.shape[1] == num_classes and num_classes > 1:
        return y.argmax(axis=1)
    return y.reshape(-1).astype(np.int64)


class Metric:
    """Base class. Subclasses implement `clear`, `update(*inputs)` and `eval`.

    `set_indexes([i, j])` selects which of the eval network's outputs feed `update` (used when
    the metric is called with all outputs, e.g. `(loss, logits, label)`)."""

    def __init__(self):
        self._indexes = None

    def clear(self):
        raise TypeError(f"{type(self).__name__} must override clear")

    def update(self, *inputs):
        raise TypeError(f"{type(self).__name__} must override update")

    def eval(self):
        raise TypeError(f"{type(self).__name__} must override eval")

    @property
    def indexes(self):
        return self._indexes

    def set_indexes(self, indexes):
        """Use only `inputs[i] for i in indexes` when updated from a network's outputs."""
        self._indexes = list(indexes)
        return self

    def _select(self, inputs):
        return inputs if self._indexes is None else tuple(inputs[i] for i in self._indexes)

    def __call__(self, *inputs):
        """One-shot: clear, update with `inputs`, eval."""
        self.clear()
        self.update(*inputs)
        return self.eval()

    @staticmethod
    def _check_count(count, name):
        if count == 0:
            raise RuntimeError(f"{name} can not be calculated: no samples were seen (call update first)")


# ---- classification accuracy ----------------------------------------------------------------

class Accuracy(Metric):
    """Fraction of correct predictions.

    classification: `y_pred` (N, C) scores, `y` (N,) class ids or (N, C) one-hot; a sample is
    correct when argmax(y_pred) == y. multilabel: `y_pred` (N, C) probabilities rounded at 0.5,
    `y` (N, C) 0/1; a sample is correct when every label matches.
    """

    def __init__(self, eval_type="classification"):
        super().__init__()
        if eval_type not in ("classification", "multilabel"):
            raise ValueError(f"eval_type must be 'classification' or 'multilabel', got {eval_type!r}")
        self.eval_type = eval_type
        self.clear()

    def clear(self):
        self._correct = 0
        self._total = 0

    def update(self, *inputs):
        if len(inputs) != 2:
            raise ValueError(f"Accuracy.update needs (y_pred, y), got {len(inputs)} inputs")
        y_pred, y = _as_numpy(inputs[0]), _as_numpy(inputs[1])
        if self.eval_type == "multilabel":
            if y_pred.shape != y.shape:
                raise ValueError(f"multilabel Accuracy: y_pred shape {y_pred.shape} != y shape {y.shape}")
            hits = np.all(np.round(y_pred) == y, axis=tuple(range(1, y.ndim)))
        else:
            y_pred = y_pred.reshape(-1, y_pred.shape[-1])
            labels = _class_labels(y, y_pred.shape[1])
            if labels.shape[0] != y_pred.shape[0]:
                raise ValueError(f"Accuracy: {y_pred.shape[0]} predictions but {labels.shape[0]} labels")
            hits = y_pred.argmax(axis=1) == labels
        self._correct += int(hits.sum())
        self._total += int(hits.size)

    def eval(self):
        self._check_count(self._total, "Accuracy")
        return self._correct / self._total


class TopKCategoricalAccuracy(Metric):
    """Fraction of samples whose true class is among the k highest scores of `y_pred` (N, C)."""

    def __init__(self, k):
        super().__init__()
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        self.k = k
        self.clear()

    def clear(self):
        self._correct = 0
        self._total = 0

    def update(self, *inputs):
        if len(inputs) != 2:
            raise ValueError(f"TopKCategoricalAccuracy.update needs (y_pred, y), got {len(inputs)} inputs")
        y_pred = _as_numpy(inputs[0])
        labels = _class_labels(inputs[1], y_pred.shape[1])
        top = np.argsort(-y_pred, axis=1, kind="stable")[:, :self.k]  # (N, k)
        self._correct += int((top == labels[:, None]).any(axis=1).sum())
        self._total += labels.shape[0]

    def eval(self):
        self._check_count(self._total, "TopKCategoricalAccuracy")
        return self._correct / self._total


class Top1CategoricalAccuracy(TopKCategoricalAccuracy):
    """Top-1 accuracy (`TopKCategoricalAccuracy(1)`)."""

    def __init__(self):
        super().__init__(1)


class Top5CategoricalAccuracy(TopKCategoricalAccuracy):
    """Top-5 accuracy (`TopKCategoricalAccuracy(5)`)."""

    def __init__(self):
        super().__init__(5)


# ---- loss and regression errors -------------------------------------------------------------

class Loss(Metric):
    """Mean over batches of the (batch-mean) loss: update(loss) with a scalar or per-sample loss."""

    def __init__(self):
        super().__init__()
        self.clear()

    def clear(self):
        self._sum = 0.0
        self._batches = 0

    def update(self, *inputs):
        if len(inputs) != 1:
            raise ValueError(f"Loss.update needs one input (the loss), got {len(inputs)}")
        loss = _as_numpy(inputs[0]).astype(np.float64)
        if loss.ndim > 1:
            raise ValueError(f"Loss.update: the loss must be a scalar or a 1-D array, got shape {loss.shape}")
        self._sum += float(loss.mean())
        self._batches += 1

    def eval(self):
        self._check_count(self._batches, "Loss")
        return self._sum / self._batches


class _ErrorSum(Metric):
    """Sum over samples of a per-sample error, divided by the number of samples (MindSpore's MAE/MSE)."""

    def __init__(self):
        super().__init__()
        self.clear()

    def clear(self):
        self._error_sum = 0.0
        self._samples = 0

    def update(self, *inputs):
        if len(inputs) != 2:
            raise ValueError(f"{type(self).__name__}.update needs (y_pred, y), got {len(inputs)} inputs")
        y_pred = _as_numpy(inputs[0]).astype(np.float64)
        y = _as_numpy(inputs[1]).astype(np.float64).reshape(y_pred.shape)
        self._error_sum += float(self._error(y_pred - y).sum())
        self._samples += y.shape[0] if y.ndim else 1

    def eval(self):
        self._check_count(self._samples, type(self).__name__)
        return self._error_sum / self._samples


class MAE(_ErrorSum):
    """Mean absolute error: sum |y_pred - y| / N (N = number of samples, the first axis)."""

    @staticmethod
    def _error(diff):
        return np.abs(diff)


class MSE(_ErrorSum):
    """Mean squared error: sum (y_pred - y)^2 / N (N = number of samples, the first axis)."""

    @staticmethod
    def _error(diff):
        return diff * diff


# ---- ranking ----------------------------------------------------------------------------------

def _midranks(values):
    """1-based ranks with ties given the mean of their positions (as scipy.stats.rankdata)."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    # Start of each run of equal values in the sorted order.
    starts = np.flatnonzero(np.r_[True, sorted_vals[1:] != sorted_vals[:-1]])
    ends = np.r_[starts[1:], len(values)]
    run_rank = (starts + ends + 1) / 2.0  # mean of 1-based positions starts+1 .. ends
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(run_rank, ends - starts)
    return ranks


class AUC(Metric):
    """Area under the ROC curve for binary labels, exactly, by rank statistics:

        AUC = (sum of the ranks of positives - P (P + 1) / 2) / (P * N)

    i.e. the probability that a random positive scores above a random negative (ties count 1/2).
    `y_pred` is (N,), (N, 1) or (N, 2) (column 1 = positive class); `y` holds 0/1.
    """

    def __init__(self):
        super().__init__()
        self.clear()

    def clear(self):
        self._scores = []
        self._labels = []

    def update(self, *inputs):
        if len(inputs) != 2:
            raise ValueError(f"AUC.update needs (y_pred, y), got {len(inputs)} inputs")
        y_pred = _as_numpy(inputs[0]).astype(np.float64)
        if y_pred.ndim == 2 and y_pred.shape[1] == 2:
            y_pred = y_pred[:, 1]
        y = _as_numpy(inputs[1])
        if y.ndim == 2 and y.shape[1] == 2:
            y = y[:, 1]
        y_pred, y = y_pred.reshape(-1), y.reshape(-1)
        if y_pred.shape != y.shape:
            raise ValueError(f"AUC: {y_pred.size} scores but {y.size} labels")
        self._scores.append(y_pred)
        self._labels.append(y.astype(bool))

    def eval(self):
        self._check_count(len(self._scores), "AUC")
        scores, labels = np.concatenate(self._scores), np.concatenate(self._labels)
        n_pos = int(labels.sum())
        n_neg = labels.size - n_pos
        if n_pos == 0 or n_neg == 0:
            raise RuntimeError(f"AUC is undefined with only one class present ({n_pos} positives, {n_neg} negatives)")
        rank_sum = _midranks(scores)[labels].sum()
        return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


# ---- per-class counts -----------------------------------------------------------------------

class _ClassCounts(Metric):
    """Accumulates true-positive, predicted and actual counts per class."""

    def __init__(self, eval_type="classification", average=True):
        super().__init__()
        if eval_type not in ("classification", "multilabel"):
            raise ValueError(f"eval_type must be 'classification' or 'multilabel', got {eval_type!r}")
        self.eval_type = eval_type
        self.average = average
        self.clear()

    def clear(self):
        self._tp = self._pred = self._actual = None

    def update(self, *inputs):
        if len(inputs) != 2:
            raise ValueError(f"{type(self).__name__}.update needs (y_pred, y), got {len(inputs)} inputs")
        y_pred = _as_numpy(inputs[0])
        if self.eval_type == "multilabel":
            pred = np.round(y_pred).astype(bool)
            actual = _as_numpy(inputs[1]).astype(bool).reshape(pred.shape)
        else:
            n_classes = y_pred.shape[1]
            eye = np.eye(n_classes, dtype=bool)
            pred = eye[y_pred.argmax(axis=1)]
            actual = eye[_class_labels(inputs[1], n_classes)]
        counts = ((pred & actual).sum(0), pred.sum(0), actual.sum(0))
        if self._tp is None:
            self._tp, self._pred, self._actual = (c.astype(np.int64) for c in counts)
        else:
            self._tp += counts[0]
            self._pred += counts[1]
            self._actual += counts[2]

    def _per_class(self):
        raise TypeError(f"{type(self).__name__} must override _per_class")

    def eval(self, average=None):
        """Macro average (a float) when `average` (default: the constructor's), else per class."""
        self._check_count(0 if self._tp is None else 1, type(self).__name__)
        values = self._per_class()
        use_average = self.average if average is None else average
        return float(values.mean()) if use_average else values

    @staticmethod
    def _safe_div(num, den):
        return np.divide(num, den, out=np.zeros(num.shape, dtype=np.float64), where=den > 0)


class Precision(_ClassCounts):
    """Per-class precision tp / (tp + fp) (0 for a class never predicted); macro mean by default."""

    def _per_class(self):
        return self._safe_div(self._tp, self._pred)


class Recall(_ClassCounts):
    """Per-class recall tp / (tp + fn) (0 for a class never present); macro mean by default."""

    def _per_class(self):
        return self._safe_div(self._tp, self._actual)


class F1(_ClassCounts):
    """Per-class F1 = 2 tp / (2 tp + fp + fn); macro mean by default."""

    def _per_class(self):
        return self._safe_div(2 * self._tp, self._pred + self._actual)


class ConfusionMatrix(Metric):
    """`num_classes` x `num_classes` counts, rows = true class, columns = predicted class.

    normalize: 'no_norm' (counts), 'target' (rows sum to 1), 'prediction' (columns sum to 1),
    'all' (everything sums to 1). `y_pred` is (N, C) scores or (N,) class ids; with `threshold`,
    binary scores (N,) are turned into ids by `score > threshold`.
    """

    _NORMS = ("no_norm", "target", "prediction", "all")

    def __init__(self, num_classes, normalize="no_norm", threshold=None):
        super().__init__()
        if normalize not in self._NORMS:
            raise ValueError(f"normalize must be one of {self._NORMS}, got {normalize!r}")
        self.num_classes = int(num_classes)
        self.normalize = normalize
        self.threshold = threshold
        self.clear()

    def clear(self):
        self._matrix = np.zeros((self.num_classes, self.num_classes), dtype=np.int64)
        self._seen = 0

    def update(self, *inputs):
        if len(inputs) != 2:
            raise ValueError(f"ConfusionMatrix.update needs (y_pred, y), got {len(inputs)} inputs")
        y_pred = _as_numpy(inputs[0])
        if y_pred.ndim == 2:
            pred = y_pred.argmax(axis=1)
        elif self.threshold is not None:
            pred = (y_pred > self.threshold).astype(np.int64)
        else:
            pred = y_pred.astype(np.int64)
        true = _class_labels(inputs[1], self.num_classes)
        np.add.at(self._matrix, (true, pred), 1)
        self._seen += true.size

    def eval(self):
        self._check_count(self._seen, "ConfusionMatrix")
        m = self._matrix.astype(np.float64)
        if self.normalize == "target":
            return self._rows_normalised(m)
        if self.normalize == "prediction":
            return self._rows_normalised(m.T).T
        if self.normalize == "all":
            return m / m.sum()
        return self._matrix.copy()

    @staticmethod
    def _rows_normalised(m):
        sums = m.sum(axis=1, keepdims=True)
        return np.divide(m, sums, out=np.zeros_like(m), where=sums > 0)


# ---- registry -------------------------------------------------------------------------------

_REGISTRY = {  # with MindSpore's short and long aliases
    "accuracy": Accuracy,
    "acc": Accuracy,
    "top_1_categorical_accuracy": Top1CategoricalAccuracy,
    "top_5_categorical_accuracy": Top5CategoricalAccuracy,
    "loss": Loss,
    "auc": AUC,
    "top_1_accuracy": Top1CategoricalAccuracy,
    "top_5_accuracy": Top5CategoricalAccuracy,
    "mae": MAE,
    "mse": MSE,
    "precision": Precision,
    "recall": Recall,
    "f1": F1,
}


def names():
    """The metric names `get_metric` and `Model(metrics={...})` understand."""
    return sorted(_REGISTRY)


def get_metric(name):
    """A new metric instance for a registered name; an unknown name lists the known ones."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; known metrics: {', '.join(names())}") from None


def get_metrics(metrics):
    """Normalise `Model`'s `metrics` argument to an ordered `{name: Metric}` dict."""
    if metrics is None:
        return {}
    if isinstance(metrics, dict):
        for name, metric in metrics.items():
            if not isinstance(metric, Metric):
                raise TypeError(f"metric {name!r} must be a Metric instance, got {type(metric).__name__}")
        return dict(metrics)
    if isinstance(metrics, str):
        metrics = [metrics]
    if not isinstance(metrics, (set, frozenset, list, tuple)):
        raise TypeError(f"metrics must be a dict of Metric or a set of names, got {type(metrics).__name__}")
    return {name: get_metric(name) for name in sorted(metrics)}
