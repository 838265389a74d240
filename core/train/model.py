"""`Model`: train, evaluate and predict with a network (MindSpore's `mindspore.train.Model`).

    model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9), metrics={"accuracy"})
    history = model.fit(10, train_ds, valid_ds, callbacks=[LossMonitor(100)])
    model.eval(valid_ds)            # {'accuracy': 0.93}

Resuming: every checkpoint written by `ModelCheckpoint` (or `Model.save_checkpoint`) carries the
training position, and `model.train(epoch, dataset, resume_from=path)` restores parameters,
optimizer state, global step and epoch, RNG state and dataset position, so the resumed run ends
bit-identical to an uninterrupted one. The MindSpore-style coarse resume also works:
`ms.load_checkpoint(path, net=model.train_network)` then `model.train(epoch, ds, initial_epoch=k)`.
"""
import os
import sys

from ..autograd import no_grad
from ..errors import CheckpointError
from ..sinking import steps_per_epoch
from .callback import CallbackList, History, LossMonitor, ProgressBar, RunContext, RunContextArgs
from .dataset_helper import BatchStream, DataSinkQueue, iterate_once
from .metrics import Loss, get_metrics
from .runner import _as_tensors, select_runner, traced_constants
from .serialization import TRAIN_STATE_KEY, load_checkpoint, load_param_into_net, save_checkpoint
from . import train_state
from ._loop import TrainLoop, Validation

__all__ = ["Model"]


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


class Model:
    """High-level training and evaluation of `network`.

    network: the forward network (or, without loss_fn, a network that returns the loss).
    loss_fn: loss Cell applied to `(network(data), label)`.
    optimizer: makes the model trainable; without optimizer and loss_fn `network` itself is the
        train network (a cell that performs a whole step, e.g. a TrainOneStepCell).
    metrics: `{'name': Metric}` or a set of names (`{'accuracy', 'loss'}`), used by eval/fit.
    eval_network, eval_indexes: a custom evaluation cell and the positions of (loss, prediction,
        label) among its outputs.
    amp_level, loss_scale_manager, boost_level: mixed precision (see mstrain.amp); amp_level
        'auto' is the device's recommended level (O0 on the CPU).
    kwargs: MindSpore's other amp arguments, `keep_batchnorm_fp32` and `cast_model_type`
        (passed to `build_train_network`).
    """

    def __init__(self, network, loss_fn=None, optimizer=None, metrics=None, eval_network=None,
                 eval_indexes=None, amp_level="O0", loss_scale_manager=None, boost_level="O0", **kwargs):
        unknown = set(kwargs) - {"keep_batchnorm_fp32", "cast_model_type"}
        if unknown:
            raise TypeError(f"Model: unknown argument(s) {sorted(unknown)}")
        self._amp_kwargs = kwargs
        self._network = network
        self._loss_fn = loss_fn
        self._optimizer = optimizer
        self._amp_level = amp_level
        self._metrics = get_metrics(metrics)
        self._train_network = self._build_train_network(loss_scale_manager, boost_level)
        self._eval_network, self._eval_indexes = self._build_eval_network(eval_network, eval_indexes)
        self._last_args = None  # RunContextArgs of the latest train/fit call
        self._sink_runner = None  # (traced constants, runner) of the latest sink-mode train call

    # ---- construction -----------------------------------------------------------------------
    def _build_train_network(self, loss_scale_manager, boost_level):
        from ..amp import auto_mixed_precision, build_train_network
        if self._optimizer is None:
            if loss_scale_manager is not None:
                raise ValueError("Model: loss_scale_manager needs an optimizer")
            auto_mixed_precision(self._network, self._amp_level, **self._amp_kwargs_for_cast())
            return self._network if self._loss_fn is None else None  # with loss_fn only: eval-only
        return build_train_network(self._network, self._optimizer, self._loss_fn, level=self._amp_level,
                                   boost_level=boost_level, loss_scale_manager=loss_scale_manager,
                                   **self._amp_kwargs)

    def _amp_kwargs_for_cast(self):
        cast = {"keep_batchnorm_fp32": self._amp_kwargs.get("keep_batchnorm_fp32")}
        if self._amp_kwargs.get("cast_model_type") is not None:
            cast["dtype"] = self._amp_kwargs["cast_model_type"]
        return cast

    def _build_eval_network(self, eval_network, eval_indexes):
        if eval_indexes is not None and (len(eval_indexes) != 3 or eval_network is None):
            raise ValueError("eval_indexes must list 3 positions (loss, prediction, label) of a given eval_network")
        if eval_network is not None:
            return eval_network, (list(eval_indexes) if eval_indexes is not None else None)
        if self._loss_fn is not None:
            from ..nn import WithEvalCell
            return WithEvalCell(self._network, self._loss_fn), [0, 1, 2]
        return None, [0, 1, 2]  # prediction and label only: `_eval_outputs` fills in loss None

    def _make_runner(self, dataset_sink_mode):
        """The execution strategy: the single place it is chosen (see mstrain.train.runner). The
        compiled (sink) runner is kept between calls while the traced constants are unchanged,
        so a second `train` call reuses the compiled step instead of tracing it again."""
        if not dataset_sink_mode:
            return select_runner(self._train_network, False)
        key = traced_constants(self._train_network)
        if self._sink_runner is None or self._sink_runner[0] != key:
            self._sink_runner = (key, select_runner(self._train_network, True))
        return self._sink_runner[1]

    @property
    def train_network(self):
        """The cell one training step calls (loss, gradients, loss scale, optimizer)."""
        return self._train_network

    @property
    def predict_network(self):
        return self._network

    @property
    def eval_network(self):
        return self._eval_network

    # ---- training ---------------------------------------------------------------------------
    def train(self, epoch, train_dataset, callbacks=None, dataset_sink_mode=False, sink_size=-1,
              initial_epoch=0, resume_from=None):
        """Train for epochs `initial_epoch + 1 .. epoch`; returns the History.

        Non-sink: one host round trip per step; step callbacks every step; an epoch is one pass.
        Sink (`dataset_sink_mode=True`): each epoch is one round trip of `sink_size` steps (the
        whole dataset when -1) fed from a prefetch queue; step callbacks fire once per sink;
        with sink_size > 0 the data is traversed endlessly and each epoch continues where the
        last stopped; any other sink_size (0 included) raises ConfigError (mstrain.sinking, the
        rule the config schema applies too). `initial_epoch` skips that many epochs (counters and data position).
        `resume_from`: a checkpoint path (or `load_checkpoint` dict) written by ModelCheckpoint or
        `save_checkpoint`; parameters, optimizer state, step, epoch (initial_epoch is then taken
        from the checkpoint), RNG and data position are restored.
        """
        return self._train(epoch, train_dataset, callbacks, dataset_sink_mode, sink_size,
                           initial_epoch, resume_from, validation=None)

    def fit(self, epoch, train_dataset, valid_dataset=None, valid_frequency=1, callbacks=None,
            dataset_sink_mode=False, valid_dataset_sink_mode=False, sink_size=-1, initial_epoch=0,
            resume_from=None):
        """`train`, evaluating on `valid_dataset` after every `valid_frequency`-th epoch (or the
        listed epochs). The results are in `RunContextArgs.eval_results` at that epoch's
        `on_train_epoch_end` (monitors see them as 'eval_<metric>') and in the History."""
        validation = None
        if valid_dataset is not None:
            if self._metrics or self._loss_fn is None:  # with a loss_fn alone, fit reports eval_loss
                self._check_metrics()
            validation = Validation(valid_dataset, valid_frequency, valid_dataset_sink_mode)
        return self._train(epoch, train_dataset, callbacks, dataset_sink_mode, sink_size,
                           initial_epoch, resume_from, validation)

    def _train(self, epoch, dataset, callbacks, sink, sink_size, initial_epoch, resume_from, validation):
        if self._train_network is None:
            raise ValueError("Model.train needs an optimizer: Model(network, loss_fn, optimizer)")
        _check_int("epoch", epoch, 1)
        _check_int("initial_epoch", initial_epoch, 0)
        stream = BatchStream(dataset)
        batch_num = steps_per_epoch(sink_size, stream.size, sink)
        start = self._start_point(stream, batch_num, initial_epoch, resume_from)
        history, callback_list = _with_default_callbacks(callbacks)
        args = RunContextArgs(
            epoch_num=epoch, initial_epoch=start.epochs_done, cur_step_num=start.step, batch_num=batch_num,
            network=self._network, loss_fn=self._loss_fn, optimizer=self._optimizer,
            train_network=self._train_network, eval_network=self._eval_network, train_dataset=dataset,
            valid_dataset=None if validation is None else validation.dataset, dataset_sink_mode=bool(sink),
            sink_size=sink_size, metrics=self._metrics)
        self._train_network.set_train(True)
        # a prefetch thread overlaps preparing batches with compute; ready batches in a list only
        # pay its hand-offs (a GIL switch per take, milliseconds for a small full-batch step)
        prefetch = sink and not stream.in_memory
        feed = DataSinkQueue(stream) if prefetch else stream
        try:
            loop = TrainLoop(args, callback_list, feed, self._make_runner(sink),
                             steps_per_call=batch_num if sink else 1, validation=validation,
                             evaluate=self._validate)
            self._last_args = args
            loop.run(start.epochs_done, start.step_in_epoch)
        finally:
            if prefetch:
                feed.close()
        return history

    def _start_point(self, stream, batch_num, initial_epoch, resume_from):
        """Where training starts; restores parameters, RNG and data position when resuming."""
        if resume_from is None:
            if initial_epoch:
                stream.seek(initial_epoch * batch_num)
            return train_state.ResumePoint(step=initial_epoch * batch_num, epochs_done=initial_epoch,
                                           step_in_epoch=0, dataset_state=None)
        state = self._load_for_resume(resume_from)
        point = train_state.resume_point(state)
        if point.dataset_state is not None:
            stream.set_state(point.dataset_state)
        train_state.restore_runtime(state, self._train_network)
        return point

    def _load_for_resume(self, resume_from):
        name = "the given dict" if isinstance(resume_from, dict) else repr(os.fspath(resume_from))
        params = resume_from if isinstance(resume_from, dict) else load_checkpoint(resume_from)
        state = params.get(TRAIN_STATE_KEY)
        if not isinstance(state, dict):
            raise CheckpointError(f"checkpoint {name} has no training position ('{TRAIN_STATE_KEY}'); "
                                  "write it with ModelCheckpoint or Model.save_checkpoint to resume from it")
        missing, _ = load_param_into_net(self._train_network, params)
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise CheckpointError(f"checkpoint {name} lacks {len(missing)} parameter(s) of the train "
                                  f"network (weights or optimizer state): {shown}")
        return state

    def save_checkpoint(self, ckpt_file_name):
        """Save the train network (weights + optimizer state) with the position of the latest
        train/fit call, so `train(..., resume_from=ckpt_file_name)` continues from here."""
        args = self._last_args
        if args is None:
            raise ValueError("Model.save_checkpoint: train or fit first (there is no position to save)")
        return save_checkpoint(self._train_network, ckpt_file_name, append_dict=train_state.resume_info(args))

    # ---- evaluation and prediction ----------------------------------------------------------
    def _check_metrics(self):
        if not self._metrics:
            raise ValueError("Model.eval needs metrics: Model(..., metrics={'accuracy'})")
        if self._loss_fn is None and self._eval_network is None and any(
                isinstance(m, Loss) for m in self._metrics.values()):
            raise ValueError("the 'loss' metric needs a loss_fn or an eval_network that returns the loss")

    def _validate(self, validation, callbacks):
        """The eval results of one validation; with a loss_fn they always hold 'loss' (seen by
        monitors as 'eval_loss', the default of EarlyStopping and ReduceLROnPlateau)."""
        metrics = self._metrics
        if self._loss_fn is not None and not any(isinstance(m, Loss) for m in metrics.values()):
            self._metrics = {**metrics, "loss": Loss()}
        try:
            results = self.eval(validation.dataset, callbacks, validation.sink_mode)
        finally:
            self._metrics = metrics
        self._train_network.set_train(True)
        return results

    def eval(self, valid_dataset, callbacks=None, dataset_sink_mode=False):
        """Evaluate the metrics over one pass of `valid_dataset`; returns `{name: value}`."""
        self._check_metrics()
        callback_list = CallbackList(callbacks)
        args = RunContextArgs(mode="eval", network=self._network, loss_fn=self._loss_fn,
                              eval_network=self._eval_network, valid_dataset=valid_dataset,
                              metrics=self._metrics, list_callback=callback_list)
        ctx = RunContext(args)
        for metric in self._metrics.values():
            metric.clear()
        (self._eval_network or self._network).set_train(False)
        callback_list.on_eval_begin(ctx)
        callback_list.on_eval_epoch_begin(ctx)
        with no_grad():
            for batch in _eval_batches(valid_dataset, dataset_sink_mode):
                callback_list.on_eval_step_begin(ctx)
                args.net_outputs = self._eval_outputs(batch)
                self._update_metrics(args.net_outputs)
                args.cur_step_num += 1
                callback_list.on_eval_step_end(ctx)
        args.batch_num = args.cur_step_num
        args.eval_results = {name: metric.eval() for name, metric in self._metrics.items()}
        callback_list.on_eval_epoch_end(ctx)
        callback_list.on_eval_end(ctx)
        return dict(args.eval_results)

    def _eval_outputs(self, batch):
        tensors = _as_tensors(batch)
        if self._eval_network is None:
            return (None, self._network(*tensors[:-1]), tensors[-1])
        outputs = self._eval_network(*tensors)
        return outputs if isinstance(outputs, tuple) else (outputs,)

    def _update_metrics(self, outputs):
        for name, metric in self._metrics.items():
            if metric.indexes is not None:
                metric.update(*(outputs[i] for i in metric.indexes))
            elif self._eval_indexes is None:
                metric.update(*outputs)
            elif isinstance(metric, Loss):
                metric.update(outputs[self._eval_indexes[0]])
            else:
                metric.update(outputs[self._eval_indexes[1]], outputs[self._eval_indexes[2]])

    def predict(self, *predict_data):
        """The network's output for `predict_data` (Tensors or arrays), in inference mode."""
        self._network.set_train(False)
        with no_grad():
            return self._network(*_as_tensors(predict_data))


def _eval_batches(dataset, sink_mode):
    if not sink_mode:
        yield from iterate_once(dataset)
        return
    stream = BatchStream(dataset)
    with DataSinkQueue(stream) as feed:
        yield from feed.take(stream.size)


def _with_default_callbacks(callbacks):
    """The user's callbacks plus a History (returned by train/fit) and, on a terminal, a ProgressBar."""
    from ..observe import ambient_callbacks
    callback_list = CallbackList(callbacks)
    for callback in ambient_callbacks():  # a run's observers (profile / summary config keys)
        callback_list.append(callback)
    history = next((cb for cb in callback_list if isinstance(cb, History)), None)
    if history is None:
        history = History()
        callback_list.append(history)
    reporting = any(isinstance(cb, (ProgressBar, LossMonitor)) for cb in callback_list)
    if not reporting and sys.stdout.isatty():
        callback_list.append(ProgressBar())
    return history, callback_list
