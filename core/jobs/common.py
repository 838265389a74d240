"""Builders that turn the common config sections into framework objects, for any job.

    prepare_run(cfg)                           seed, execution mode, parallel context
    build_optimizer(cfg.optimizer, params, total_steps)
    learning_rates(cfg.optimizer, total_steps) float, or one learning rate per step
    build_callbacks(cfg.train, name)           loss/time monitors, history, checkpoints

Kits may use them: they take only the sections of `mstrain.config.schema`.
"""
import dataclasses
import math
import os

from .. import nn
from ..config.schema import OptimizerConfig, TrainConfig
from ..errors import ConfigError

__all__ = ["prepare_run", "build_optimizer", "learning_rates", "build_callbacks"]


def prepare_run(cfg):
    """Seed every generator, pick PyNative or graph mode, set the dataset workers and the parallel context.

    Returns the `ParallelGroups` of this rank when the job runs in parallel, else None.
    """
    from ..context import GRAPH_MODE, PYNATIVE_MODE, set_context
    from ..parallel import set_auto_parallel_context
    from ..random import set_seed

    set_seed(cfg.train.seed)
    set_context(mode=GRAPH_MODE if cfg.train.mode == "graph" else PYNATIVE_MODE)
    from ..dataset import config as dataset_config
    dataset_config.set_num_parallel_workers(cfg.data.num_workers)  # the default of every map()
    if cfg.parallel.parallel_mode == "stand_alone":  # one process: only the keys that act on it
        p = cfg.parallel
        set_auto_parallel_context(parallel_mode="stand_alone", recompute=p.recompute,
                                  strategy_ckpt_save_file=p.strategy_ckpt_save_file,
                                  strategy_ckpt_load_file=p.strategy_ckpt_load_file)
        return None
    from ..parallel.config import init_parallel
    full = dataclasses.asdict(cfg)
    return init_parallel(full["parallel"], full.get("model"), full_config=full)


def learning_rates(opt: OptimizerConfig, total_steps):
    """The learning rate as a float (constant, no warm-up) or a per-step list:

        step < warmup:  lr * (step + 1) / warmup
        after warm-up:  p = min(1, (step - warmup) / decay_steps)
                        constant: lr;  linear: lr + (min_lr - lr) * p;
                        cosine: min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2
    with decay_steps = total_steps - warmup when 0.
    """
    if opt.schedule == "constant" and opt.warmup_steps == 0:
        return opt.lr
    decay = opt.decay_steps or max(1, total_steps - opt.warmup_steps)
    rates = []
    for step in range(max(total_steps, 1)):
        if step < opt.warmup_steps:
            rates.append(opt.lr * (step + 1) / opt.warmup_steps)
            continue
        progress = min(1.0, (step - opt.warmup_steps) / decay)
        if opt.schedule == "linear":
            rates.append(opt.lr + (opt.min_lr - opt.lr) * progress)
        elif opt.schedule == "cosine":
            rates.append(opt.min_lr + (opt.lr - opt.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress)))
        else:
            rates.append(opt.lr)
    return rates


def build_optimizer(opt: OptimizerConfig, params, total_steps):
    """The nn optimizer named by `opt.name` (sgd: plain SGD; momentum: nn.Momentum; adamw: nn.AdamW,
    decoupled decay with bias correction), with its learning-rate schedule and gradient clipping."""
    lr = learning_rates(opt, total_steps)
    beta1, beta2 = opt.betas
    common = dict(learning_rate=lr, weight_decay=opt.weight_decay, grad_clip=opt.grad_clip or None)
    adam = dict(beta1=beta1, beta2=beta2, eps=opt.eps)
    if opt.name == "sgd":
        return nn.SGD(params, **common)
    if opt.name == "momentum":
        return nn.Momentum(params, momentum=opt.momentum, use_nesterov=opt.nesterov, **common)
    if opt.name == "adam":
        return nn.Adam(params, **adam, **common)
    if opt.name == "adamw":
        return nn.AdamW(params, **adam, **common)
    if opt.name == "lazyadam":
        return nn.LazyAdam(params, **adam, **common)
    # the schema's choices make this unreachable from a validated config
    raise ConfigError(f"unknown optimizer {opt.name!r}", key="optimizer.name")


def build_callbacks(train: TrainConfig, name, steps_per_epoch):
    """Callbacks for Model.train: History always; LossMonitor/TimeMonitor when log_every > 0,
    else (on rank 0) a ProgressBar: a live bar on a terminal, one plain line per epoch otherwise;
    ModelCheckpoint every checkpoint_every epochs into train.output_dir/<name>."""
    from ..log import is_main_process
    from ..train.callback import History, LossMonitor, ProgressBar, TimeMonitor

    callbacks = [History()]
    if train.log_every:
        callbacks += [LossMonitor(per_print_times=train.log_every), TimeMonitor()]
    elif is_main_process():  # print_every past the epoch's steps: off a terminal, only epoch ends print
        callbacks.append(ProgressBar(print_every=max(steps_per_epoch, 0) + 1))
    if train.checkpoint_every:
        from ..train.callback import CheckpointConfig, ModelCheckpoint
        config = CheckpointConfig(save_checkpoint_steps=train.checkpoint_every * steps_per_epoch)
        callbacks.append(ModelCheckpoint(prefix=name, directory=os.path.join(train.output_dir, name),
                                         config=config))
    return callbacks
