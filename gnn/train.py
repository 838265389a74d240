"""Full-batch node-classification training through `mstrain.Model`: one compiled step per epoch,
the papers' early-stopping rules as callbacks, and optional mixed precision (amp O2: float16
compute, float32 master weights, a dynamic loss scale in the standard loss-scaled train cell).

    trainer = NodeClassificationTrainer(model, graph, optimizer)
    trainer.fit(200, callbacks=[KipfStopping(trainer, window=10)])
    trainer.evaluate(graph.test_mask)        # (loss, accuracy) in eval mode

Each epoch is one `Model.train` step over the whole graph (forward, loss on the training nodes,
backward, update; in sink mode, compiled once), then the validation loss and accuracy are put in
the run context's `eval_results` ('val_loss', 'val_acc') for the callbacks after it. Early
stopping is a registry of callbacks (`STOPPING_RULES`): 'kipf' (Kipf & Welling's window rule),
'patience' (Velickovic et al.'s rule), 'none'.
"""
import math
import time

import numpy as np

import mstrain as ms
from mstrain import Model, Tensor, nn
from mstrain.errors import ConfigError
from mstrain.ops import functional as F
from mstrain.train import DynamicLossScaleManager
from mstrain.train.callback import Callback

__all__ = ["NodeClassificationTrainer", "NodeClassificationLoss", "KipfStopping", "PatienceStopping",
           "NoStopping", "STOPPING_RULES", "make_stopping_rule"]


class NodeClassificationLoss(nn.Cell):
    """Mean cross-entropy of `network(graph.x, graph)` over the training nodes, taken in float32
    (the network may compute in float16). Called with the training labels."""

    def __init__(self, network, graph):
        super().__init__(auto_prefix=False)
        self.network = network
        self.graph = graph
        self.train_index = np.flatnonzero(graph.train_mask)

    def construct(self, labels):
        picked = F.getitem(self.network(self.graph.x, self.graph), self.train_index)
        if picked.dtype != ms.float32:
            picked = F.cast(picked, ms.float32)
        return F.mean(F.softmax_cross_entropy(picked, labels))


class NodeClassificationTrainer:
    """Trains `model(x, graph) -> logits` on `graph` with `optimizer`, full batch, through Model.

    amp_level 'O2' computes the network in float16, keeps the Parameters in float32, takes the loss
    in float32 and scales it by a dynamic loss scale (MindSpore's O2 default: halved on overflow,
    when the step is skipped, doubled after 2000 clean steps).
    """

    def __init__(self, model, graph, optimizer, amp_level="O0", loss_scale=2.0 ** 16):
        if amp_level not in ("O0", "O2"):
            raise ConfigError(f"amp_level must be 'O0' or 'O2' for GNN training, got {amp_level!r}",
                              key="amp_level")
        self.model, self.graph, self.optimizer = model, graph, optimizer
        self.params = optimizer.parameters
        self.amp_level = amp_level
        self.loss_network = NodeClassificationLoss(model, graph)
        manager = DynamicLossScaleManager(loss_scale, 2, 2000) if amp_level == "O2" else None
        self.scaler = None if manager is None else manager.get_update_cell()
        self.engine = Model(self.loss_network, optimizer=optimizer, amp_level=amp_level,
                            loss_scale_manager=manager)
        self.batches = [(Tensor(graph.y[self.loss_network.train_index].astype(np.int32)),)]
        # Each epoch runs as the compiled step (sink mode). The loss-scaled O2 step compiles too: its
        # overflow flag gates the Adam update inside the graph (TrainOneStepWithLossScaleCell).
        self.compiled = True
        self.history = []       # per epoch: epoch, train_loss, val_loss, val_acc, step_ms
        self.step_seconds = []  # wall time of each epoch's training step (host round trip included)
        self.skipped_steps = 0

    def fit(self, epochs, callbacks=()):
        """Train up to `epochs` epochs (callbacks may stop earlier); returns the history."""
        recorder = _EpochRecorder(self)
        self.engine.train(epochs, self.batches, callbacks=[recorder, *callbacks], dataset_sink_mode=self.compiled)
        return self.history

    # -- evaluation ----------------------------------------------------------------------------------
    def logits(self):
        """Eval-mode logits of every node, float32 (N, classes)."""
        self.model.set_train(False)
        with ms.no_grad():
            logits = self.model(self.graph.x, self.graph)
        return logits.asnumpy().astype(np.float32)

    def evaluate(self, mask, logits=None):
        """(mean cross-entropy, accuracy) over the nodes of `mask`, in eval mode."""
        logits = self.logits() if logits is None else logits
        index = np.flatnonzero(mask)
        picked = logits[index] - logits[index].max(axis=1, keepdims=True)
        log_probs = picked - np.log(np.exp(picked).sum(axis=1, keepdims=True))
        labels = self.graph.y[index]
        loss = -float(log_probs[np.arange(index.shape[0]), labels].mean())
        accuracy = float((logits[index].argmax(axis=1) == labels).mean())
        return loss, accuracy

    def state(self):
        """A copy of every parameter's value (to restore the best epoch)."""
        return [p.asnumpy().copy() for p in self.params]

    def load_state(self, state):
        for p, value in zip(self.params, state):
            p.asnumpy()[...] = value

    def ms_per_epoch(self, warmup=5):
        """Median training-step time in milliseconds after `warmup` steps (all steps if fewer)."""
        timed = self.step_seconds[warmup:] or self.step_seconds
        return 1e3 * float(np.median(timed)) if timed else math.nan


class _EpochRecorder(Callback):
    """Times each epoch's step, counts skipped (overflowed) steps, validates after each epoch and
    puts 'val_loss' / 'val_acc' in the run context's eval_results for the callbacks after it."""

    def __init__(self, trainer):
        self.trainer = trainer
        self._start = self._scale = None

    def on_train_step_begin(self, run_context):
        scaler = self.trainer.scaler
        self._scale = None if scaler is None else scaler.loss_scale
        self._start = time.perf_counter()

    def on_train_step_end(self, run_context):
        trainer = self.trainer
        trainer.step_seconds.append(time.perf_counter() - self._start)
        # a dynamic scale shrinks exactly on an overflowed (skipped) step, unless already at 1
        if self._scale is not None and trainer.scaler.loss_scale < self._scale:
            trainer.skipped_steps += 1

    def on_train_epoch_end(self, run_context):
        trainer, args = self.trainer, run_context.original_args()
        val_loss, val_acc = trainer.evaluate(trainer.graph.val_mask)
        trainer.model.set_train(True)  # the compiled step was traced in training mode
        args.eval_results.update(val_loss=val_loss, val_acc=val_acc)
        trainer.history.append({"epoch": args.cur_epoch_num, "train_loss": args.loss,
                                "val_loss": val_loss, "val_acc": val_acc, "step_ms": 1e3 * trainer.step_seconds[-1]})


# ---- early-stopping rules (callbacks reading eval_results' val_loss and val_acc) ---------------------

class NoStopping(Callback):
    """Train every epoch; test the last parameters."""

    def __init__(self, trainer=None, **_):
        self.trainer = trainer
        self.stop_epoch = None

    def on_train_epoch_end(self, run_context):
        args = run_context.original_args()
        results = args.eval_results
        if self.update(self.trainer, args.cur_epoch_num - 1, results["val_loss"], results["val_acc"]):
            run_context.request_stop()

    def update(self, trainer, epoch, val_loss, val_acc):
        """Take epoch `epoch`'s (0-based) validation figures; True to stop after it."""
        return False

    def finish(self, trainer):
        """(test accuracy, val accuracy, epoch whose parameters were tested)."""
        logits = trainer.logits()
        return trainer.evaluate(trainer.graph.test_mask, logits)[1], trainer.evaluate(
            trainer.graph.val_mask, logits)[1], len(trainer.step_seconds)


class KipfStopping(NoStopping):
    """Kipf & Welling (2017): stop at the first epoch (after `window`) whose validation cost, the
    cross-entropy plus the L2 term on the decayed parameters, exceeds the mean of the previous
    `window` epochs; test the parameters of that epoch."""

    def __init__(self, trainer=None, window=10, l2_weight=0.0, l2_params=(), **_):
        super().__init__(trainer)
        self.window, self.l2_weight, self.l2_params = window, l2_weight, list(l2_params)
        self.costs = []

    def update(self, trainer, epoch, val_loss, val_acc):
        l2 = sum(float(np.square(p.asnumpy(), dtype=np.float64).sum()) for p in self.l2_params) / 2
        self.costs.append(val_loss + self.l2_weight * l2)
        if epoch > self.window and self.costs[-1] > np.mean(self.costs[-self.window - 1:-1]):
            self.stop_epoch = epoch + 1
            return True
        return False


class PatienceStopping(NoStopping):
    """Velickovic et al. (2018), as their code: stop when neither validation accuracy nor loss has
    improved for `patience` epochs; test the parameters of the last epoch that improved both."""

    def __init__(self, trainer=None, patience=100, **_):
        super().__init__(trainer)
        self.patience = patience
        self.best_acc, self.best_loss, self.waited = 0.0, math.inf, 0
        self.best_state, self.best_epoch = None, 0

    def update(self, trainer, epoch, val_loss, val_acc):
        if val_acc >= self.best_acc or val_loss <= self.best_loss:
            if val_acc >= self.best_acc and val_loss <= self.best_loss:
                self.best_state, self.best_epoch = trainer.state(), epoch + 1
            self.best_acc, self.best_loss = max(val_acc, self.best_acc), min(val_loss, self.best_loss)
            self.waited = 0
            return False
        self.waited += 1
        if self.waited >= self.patience:
            self.stop_epoch = epoch + 1
            return True
        return False

    def finish(self, trainer):
        if self.best_state is not None:
            trainer.load_state(self.best_state)
        test_acc, val_acc, _ = super().finish(trainer)
        return test_acc, val_acc, self.best_epoch or len(trainer.step_seconds)


STOPPING_RULES = {"kipf": KipfStopping, "patience": PatienceStopping, "none": NoStopping}


def make_stopping_rule(name, trainer=None, **kwargs):
    """The early-stopping callback `name` for `trainer`; an unknown name lists the known ones."""
    if name not in STOPPING_RULES:
        raise ConfigError(f"unknown early-stopping rule {name!r}; known: {', '.join(sorted(STOPPING_RULES))}",
                          key="early_stopping")
    return STOPPING_RULES[name](trainer, **kwargs)
