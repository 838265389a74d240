"""`SummaryCollector`: MindSpore's callback that records a training run for TensorBoard.

    model.train(3, data, callbacks=[SummaryCollector("./summary", collect_freq=10)])

Every `collect_freq` training steps it records the loss ('loss'), the learning rate
('learning_rate') and, every `collect_tensor_freq` steps, histograms of the weights
('<param>/weight') and of the gradients ('<param>/gradient'). Validation metrics of `Model.fit`
are recorded as 'eval_<name>' at the epoch end. In sink mode the loss of every step of a sink is
recorded at its own step number (the runner reports them all), not one value per sink.
"""
import json
import re

import numpy as np

from ..ops.summary_ops import take_summaries
from ..train.callback import Callback
from ..train.callback._callback import loss_value
from .record import SummaryRecord

__all__ = ["SummaryCollector"]

_SPECIFIED_KEYS = {
    "collect_metric": "loss, learning rate and validation metrics as scalars",
    "collect_histogram": "histograms of the parameters selected by histogram_regular",
    "collect_gradients": "histograms of the gradients of those parameters (one extra backward pass "
                         "on the step's last batch, at the parameters after the step)",
    "collect_input_data": "the first image of the step's last batch, when it is NCHW or NHWC",
    "histogram_regular": "regex of parameter names to histogram; None = the first 5 parameters",
}


class SummaryCollector(Callback):
    """Record loss, learning rate, metrics, histograms and images into `summary_dir`.

    summary_dir: directory of the TensorBoard event file.
    collect_freq: record scalars every this many training steps (and at step 1).
    collect_specified_data: dict overriding the defaults of the keys in `_SPECIFIED_KEYS`
        (all True, histogram_regular None); keep_default_action=False starts from all False.
    collect_tensor_freq: histograms every this many steps (default: collect_freq).
    custom_lineage_data: dict of str -> str/int/float written once as the text summary 'lineage'.
    max_file_size: passed to SummaryRecord.
    """

    def __init__(self, summary_dir, collect_freq=10, collect_specified_data=None, keep_default_action=True,
                 custom_lineage_data=None, collect_tensor_freq=None, max_file_size=None):
        for name, value in (("collect_freq", collect_freq), ("collect_tensor_freq", collect_tensor_freq)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"SummaryCollector: {name} must be an int >= 1, got {value!r}")
        self.summary_dir = summary_dir
        self.collect_freq = collect_freq
        self.collect_tensor_freq = collect_tensor_freq or collect_freq
        self._specified = self._check_specified(collect_specified_data, keep_default_action)
        self._lineage = self._check_lineage(custom_lineage_data)
        self._max_file_size = max_file_size
        self._record = None
        self._texts = []

    @staticmethod
    def _check_specified(specified, keep_default):
        options = {k: keep_default for k in _SPECIFIED_KEYS}
        options["histogram_regular"] = None
        specified = specified or {}
        if not isinstance(specified, dict):
            raise TypeError(f"SummaryCollector: collect_specified_data must be a dict, got {type(specified).__name__}")
        unknown = sorted(set(specified) - set(_SPECIFIED_KEYS))
        if unknown:
            raise ValueError(f"SummaryCollector: unknown collect_specified_data key(s) {unknown}; "
                             f"valid: {sorted(_SPECIFIED_KEYS)}")
        options.update(specified)
        if options["histogram_regular"] is not None:
            options["histogram_regular"] = re.compile(options["histogram_regular"])
        return options

    @staticmethod
    def _check_lineage(lineage):
        if lineage is None:
            return None
        if not isinstance(lineage, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                                    for k, v in lineage.items()):
            raise TypeError("SummaryCollector: custom_lineage_data must be a dict of str -> str, int or float")
        return dict(lineage)

    def add_text(self, tag, text):
        """Record `text` (e.g. the run's config) once, at the start of training."""
        self._texts.append((tag, str(text)))

    @property
    def summary_record(self):
        """The SummaryRecord of the current run (None outside training)."""
        return self._record

    # ---- hooks --------------------------------------------------------------------------------
    def on_train_begin(self, run_context):
        args = run_context.original_args()
        if self._record is None:
            self._record = SummaryRecord(self.summary_dir, max_file_size=self._max_file_size)
        texts = list(self._texts)
        if self._lineage is not None:
            texts.append(("lineage", json.dumps(self._lineage, sort_keys=True, indent=1)))
        for tag, text in texts:
            self._record.add_value("text", tag, text)
        self._record.record(args.cur_step_num)

    def on_train_step_begin(self, run_context):
        take_summaries()  # values written outside training steps (evaluation) are not this step's

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        outputs = args.step_outputs or [args.net_outputs]
        first = args.cur_step_num - len(outputs) + 1
        record = self._record
        self._record_summary_ops(take_summaries(), first, len(outputs))
        if self._specified["collect_metric"]:
            for i, out in enumerate(outputs):
                step = first + i
                if self._due(step, self.collect_freq):
                    record.add_value("scalar", "loss", loss_value(out))
                    lr = _learning_rate_at(args.optimizer, step)
                    if lr is not None:
                        record.add_value("scalar", "learning_rate", lr)
                    record.record(step)
        step = args.cur_step_num
        if any(self._due(s, self.collect_tensor_freq) for s in range(first, step + 1)):
            self._collect_tensors(args)
            record.record(step)

    def on_train_epoch_end(self, run_context):
        args = run_context.original_args()
        if self._specified["collect_metric"] and args.eval_results:
            for name, value in args.eval_results.items():
                if np.asarray(value).size == 1:
                    self._record.add_value("scalar", f"eval_{name}", float(np.asarray(value)))
            self._record.record(args.cur_step_num)

    def on_train_end(self, run_context):
        self.close()

    def close(self):
        if self._record is not None:
            self._record.close()
            self._record = None

    def _record_summary_ops(self, entries, first, steps):
        """Values of summary operators: each tag's k-th value of a round trip of `steps` steps is
        step first + k (several calls per step: spread evenly over the steps)."""
        by_step = {}
        for (kind, tag), values in _per_tag(entries).items():
            per_step = max(1, len(values) // steps)
            for k, value in enumerate(values):
                by_step.setdefault(first + min(k // per_step, steps - 1), []).append((kind, tag, value))
        for step in sorted(by_step):
            if self._due(step, self.collect_freq):
                for kind, tag, value in by_step[step]:
                    self._record.add_value(kind, tag, value)
                self._record.record(step)

    @staticmethod
    def _due(step, freq):
        return step == 1 or step % freq == 0

    # ---- tensors --------------------------------------------------------------------------------
    def _selected_params(self, network):
        params = list(network.trainable_params()) if network is not None else []
        pattern = self._specified["histogram_regular"]
        if pattern is None:
            return params[:5]
        return [p for p in params if pattern.search(p.name)]

    def _collect_tensors(self, args):
        params = self._selected_params(args.network)
        if self._specified["collect_histogram"]:
            for p in params:
                self._record.add_value("histogram", f"{p.name}/weight", p.asnumpy())
        batch = getattr(args, "last_batch", None)
        if batch is None:
            return
        if self._specified["collect_gradients"] and params and args.loss_fn is not None:
            for p, g in zip(params, _gradients(args.network, args.loss_fn, params, batch)):
                self._record.add_value("histogram", f"{p.name}/gradient", g)
        if self._specified["collect_input_data"]:
            image = _image_of(batch[0])
            if image is not None:
                self._record.add_value("image", "input_data", image)


def _per_tag(entries):
    tags = {}
    for kind, tag, value in entries:
        tags.setdefault((kind, tag), []).append(value)
    return {(kind, tag): values for (kind, tag), values in tags.items()}


def _gradients(network, loss_fn, params, batch):
    from ..autograd import value_and_grad
    from ..tensor import Tensor
    tensors = [b if isinstance(b, Tensor) else Tensor(np.asarray(b)) for b in batch]

    from .. import autograd

    def loss(*inputs):
        if loss_fn is None:  # the network computes its loss from the whole batch (a loss network)
            return network(*inputs)
        return loss_fn(network(*inputs[:-1]), inputs[-1])
    # This extra backward pass is not a training step: data-parallel gradient reducers (grad-ready
    # hooks) must not start all-reduces for it. The gradients shown are this rank's own.
    # Its dropout draws and summary-operator values are undone too, so the run goes on unchanged.
    from ..ops.summary_ops import discard_since, summary_mark
    from ..random import get_rng_state, set_rng_state
    hooks, rng, mark = list(autograd.grad_ready_hooks), get_rng_state(), summary_mark()
    autograd.grad_ready_hooks.clear()
    try:
        _, grads = value_and_grad(loss, None, tuple(params))(*tensors)
    finally:
        autograd.grad_ready_hooks[:] = hooks
        set_rng_state(rng)
        discard_since(mark)
    return [g.asnumpy() for g in grads]


def _image_of(data):
    array = np.asarray(data.asnumpy() if hasattr(data, "asnumpy") else data)
    if array.ndim != 4:
        return None
    if array.shape[1] in (1, 3, 4):
        return array[:1]
    if array.shape[3] in (1, 3, 4):
        return np.transpose(array[:1], (0, 3, 1, 2))
    return None


def _learning_rate_at(optimizer, step):
    """The learning rate the update of (1-based) `step` used, or None without an optimizer."""
    if optimizer is None or not hasattr(optimizer, "learning_rate"):
        return None
    from ..autograd import no_grad
    from ..tensor import Parameter, Tensor
    lr = optimizer.learning_rate
    if isinstance(lr, Parameter):
        return float(np.asarray(lr.asnumpy()).reshape(-1)[0])
    with no_grad():
        value = lr(Tensor(np.array(step - 1, np.int32)))
    return float(np.asarray(value.asnumpy()).reshape(-1)[0])
