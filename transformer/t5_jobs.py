"""Job `t5_copy`: a T5 encoder-decoder learns to copy random id sequences, on 1 to N ranks.

    mstrain --config configs/t5_copy.yaml
    mpiexec -n 2 mstrain --config t5_copy parallel_config.data_parallel=2

Task: sources of data.length ids uniform in [2, vocab_size) (0 = decoder start, 1 unused), the
target is the source; the decoder reads [0] + target[:-1]. Every step draws a fresh batch from
numpy.random.default_rng(seed), in order. Quality: greedy decoding (KV cache) of data.eval_sequences
unseen sequences: the fraction of target positions right (copy accuracy) and of sequences copied
whole. Writes to train.output_dir: t5_copy.ckpt, history.json and curves.png.
"""
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Union

import numpy as np

import mstrain as ms
from mstrain import Model
from mstrain import communication as comm
from mstrain import dataset as ds
from mstrain.communication.transport import all_reduce_array
from mstrain.config import OptimizerConfig, option, section
from mstrain.errors import ConfigError, ParallelConfigError
from mstrain.fileio import write_bytes_atomically
from mstrain.jobs.common import build_optimizer
from mstrain.log import get_logger, is_main_process
from mstrain.parallel import parallel_groups, set_auto_parallel_context
from mstrain.registry import register_job
from mstrain.train.callback import Callback

from .config import RecomputeConfig, announce_layout, resolve_auto_layout
from .t5 import T5, T5Config, T5WithLoss

__all__ = ["T5CopyConfig", "run_t5_copy", "copy_batches", "copy_accuracy"]

_log = get_logger("transformer")
FIRST_TOKEN = 2


@dataclass
class T5ModelConfig:
    """T5 shape (RMSNorm, relative position buckets, no biases, tied embedding)."""
    vocab_size: int = option(32, "ids 0..vocab_size-1 (0 starts the decoder, the task uses 2..)", low=3)
    hidden_size: int = option(64, "d_model", low=1)
    num_layers: int = option(3, "encoder layers (and as many decoder layers)", low=1)
    num_heads: int = option(4, "attention heads", low=1)
    ffn_hidden_size: int = option(256, "d_ff (ReLU MLP)", low=1)
    relative_buckets: int = option(32, "relative position buckets", low=2)
    relative_max_distance: int = option(128, "distance where the log-spaced buckets end", low=2)


@dataclass
class T5Train:
    """Steps, batches, evaluation, outputs."""
    steps: int = option(3000, "training steps (a fresh batch each)", low=1)
    batch_size: int = option(32, "global batch (sequences per step over all data-parallel ranks)", low=1)
    seed: int = option(0, "seed of the weights and of the sequences", low=0)
    dataset_sink_mode: bool = option(True, "run log_every steps per host round trip as one compiled graph")
    log_every: int = option(100, "steps per progress line (and per sink)", low=1)
    output_dir: str = option("outputs/t5_copy", "directory for the checkpoint, history.json, curves.png")


@dataclass
class CopyTask:
    """The copy task."""
    length: int = option(10, "ids per source sequence", low=1)
    target_length: int = option(0, "the target is the source's first target_length ids (W8: 128 -> 64); "
                                   "0 = the whole source", low=0)
    eval_sequences: int = option(256, "unseen sequences decoded greedily for the copy accuracy", low=1)


@dataclass
class T5ParallelLayout:
    """How the ranks split the work (MindFormers' parallel_config)."""
    data_parallel: int = option(1, "data-parallel replicas; each reads batch_size / data_parallel sequences", low=1)
    optimizer_shard: bool = option(False, "shard the optimizer state over the data-parallel ranks (ZeRO-1)")


@dataclass
class T5CopyConfig:
    """Config of the t5_copy job."""
    job: str = option("", "the registered job this config runs (mstrain list shows them)")
    run_mode: str = option("train", "train, or eval (copy accuracy of load_checkpoint)", choices=("train", "eval"))
    load_checkpoint: Optional[str] = option(None, "checkpoint to evaluate (run_mode eval)")
    model: T5ModelConfig = section(T5ModelConfig)
    train: T5Train = section(T5Train)
    optimizer: OptimizerConfig = section(OptimizerConfig)
    data: CopyTask = section(CopyTask)
    parallel_config: Union[Literal["auto"], T5ParallelLayout] = section(
        T5ParallelLayout, "how the ranks split the work (data_parallel, optimizer_shard), or auto: the strategy "
                          "search picks them for the ranks and the model")
    recompute_config: RecomputeConfig = section(RecomputeConfig)


def copy_batches(rng, count, batch, length, vocab_size, target_length=None):
    """(sources (count, batch, length), decoder inputs, labels (count, batch, target_length)) int32: the
    label is the source's first target_length ids (all of them by default)."""
    source = rng.integers(FIRST_TOKEN, vocab_size, size=(count, batch, length)).astype(np.int32)
    labels = source[..., :target_length or length].copy()
    decoder_input = np.concatenate([np.zeros_like(labels[..., :1]), labels[..., :-1]], axis=-1)
    return source, decoder_input, labels


def target_length(cfg):
    """Target ids per sequence: data.target_length, or the whole source."""
    return cfg.data.target_length or cfg.data.length


def copy_accuracy(network, source, target):
    """(fraction of target positions, fraction of whole sequences) greedy decoding gets right."""
    out = network.generate(source, target.shape[1])[:, 1:]
    return float((out == target).mean()), float((out == target).all(-1).mean())


def _resolve_auto(cfg):
    """parallel_config=auto: the search's choice among the splits T5 runs (data parallel, optimizer
    shard, recompute)."""
    if cfg.parallel_config != "auto":
        return cfg
    from mstrain.parallel.cost_model import TransformerSpec
    comm.init()
    m = cfg.model
    # The cost model's layers are decoder blocks: the encoder and decoder stacks count as 2 x num_layers
    # of them over the source length (cross-attention's extra products are left out).
    spec = TransformerSpec(num_layers=2 * m.num_layers, hidden_size=m.hidden_size, num_heads=m.num_heads,
                           vocab_size=m.vocab_size, seq_length=cfg.data.length, batch_size=cfg.train.batch_size,
                           ffn_hidden_size=m.ffn_hidden_size)
    cfg, best = resolve_auto_layout(cfg, spec, comm.get_group_size(), lambda best: T5ParallelLayout(
        data_parallel=best.dp, optimizer_shard=best.optimizer_shard), max_model_parallel=1, max_pipeline_stages=1)
    announce_layout(cfg, best)
    return cfg


def _setup(cfg):
    comm.init()
    ranks = comm.get_group_size()
    p, m = cfg.parallel_config, cfg.model
    if p.data_parallel != ranks:
        raise ParallelConfigError(f"parallel_config.data_parallel ({p.data_parallel}) must equal the number of "
                                  f"ranks ({ranks})")
    if m.hidden_size % m.num_heads:
        raise ParallelConfigError(f"model.hidden_size: {m.hidden_size} is not divisible by model.num_heads ({m.num_heads})")
    if cfg.train.batch_size % p.data_parallel:
        raise ParallelConfigError(f"train.batch_size: {cfg.train.batch_size} is not divisible by "
                                  f"parallel_config.data_parallel ({p.data_parallel})")
    if cfg.data.target_length > cfg.data.length:
        raise ConfigError(f"{cfg.data.target_length} is above data.length ({cfg.data.length}): the target is a "
                          f"prefix of the source", key="data.target_length")
    if cfg.train.steps % cfg.train.log_every:
        raise ConfigError(f"{cfg.train.log_every} must divide train.steps ({cfg.train.steps})", key="train.log_every")
    if ranks == 1:
        set_auto_parallel_context(parallel_mode="stand_alone")
        return None
    set_auto_parallel_context(parallel_mode="data_parallel", enable_parallel_optimizer=p.optimizer_shard,
                              gradients_mean=True)
    return parallel_groups()


class _Log(Callback):
    def __init__(self, cfg, groups):
        self.cfg, self.groups, self.records, self.step_losses, self._pending = cfg, groups, [], [], []
        self._start = time.perf_counter()

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        self._pending += [float(np.asarray(o.asnumpy())) for o in (args.step_outputs or [args.net_outputs])]
        if args.cur_step_num % self.cfg.train.log_every:
            return
        losses, self._pending = np.asarray(self._pending, np.float64), []
        if self.groups is not None:
            losses = all_reduce_array(losses, self.groups.data, "sum") / self.groups.data_parallel
        self.step_losses.extend(float(v) for v in losses)
        seconds, self._start = time.perf_counter() - self._start, time.perf_counter()
        tokens = len(losses) * self.cfg.train.batch_size * target_length(self.cfg)
        record = {"epoch": args.cur_step_num, "train_loss": float(losses.mean()),
                  "target_tokens_per_s": round(tokens / seconds, 1)}
        self.records.append(record)
        if is_main_process():
            _log.info("step %d/%d loss %.4f %.0f target tokens/s", args.cur_step_num, self.cfg.train.steps,
                      record["train_loss"], record["target_tokens_per_s"])


def _train(cfg, network, groups):
    t, m = cfg.train, cfg.model
    dp = 1 if groups is None else groups.data_parallel
    per_rank = t.batch_size // dp
    rng = np.random.default_rng(t.seed)
    source, decoder_input, labels = copy_batches(rng, t.steps, t.batch_size, cfg.data.length, m.vocab_size,
                                                 target_length(cfg))
    rank = 0 if groups is None else groups.dp_rank
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    flat = lambda a: a[:, rows].reshape(-1, a.shape[-1])  # noqa: E731
    data = ds.NumpySlicesDataset({"source": flat(source), "decoder_input": flat(decoder_input),
                                  "labels": flat(labels)}, shuffle=False, num_shards=1, shard_id=0).batch(per_rank)
    if cfg.recompute_config.recompute:
        for block in list(network.encoder) + list(network.decoder):
            block.recompute()
    optimizer = build_optimizer(cfg.optimizer, network.trainable_params(), t.steps)
    model = Model(T5WithLoss(network), optimizer=optimizer)
    log = _Log(cfg, groups)
    if t.dataset_sink_mode:
        model.train(t.steps // t.log_every, data, callbacks=[log], dataset_sink_mode=True, sink_size=t.log_every)
    else:
        model.train(1, data, callbacks=[log])
    return log


@register_job("t5_copy", schema=T5CopyConfig)
def run_t5_copy(cfg):
    """T5 encoder-decoder on a copy task: greedy copy accuracy on unseen sequences."""
    cfg = _resolve_auto(cfg)
    groups = _setup(cfg)
    ms.set_seed(cfg.train.seed)
    m = cfg.model
    network = T5(T5Config(vocab_size=m.vocab_size, hidden_size=m.hidden_size, num_layers=m.num_layers,
                          num_heads=m.num_heads, ffn_hidden_size=m.ffn_hidden_size,
                          relative_buckets=m.relative_buckets, relative_max_distance=m.relative_max_distance,
                          max_decode_length=target_length(cfg) + 1))
    # unseen sequences: a generator of its own, never used for training batches
    eval_source, _, eval_target = (a[0] for a in copy_batches(np.random.default_rng([cfg.train.seed, 1]), 1,
                                                             cfg.data.eval_sequences, cfg.data.length,
                                                             m.vocab_size, target_length(cfg)))
    path = Path(cfg.train.output_dir) / "t5_copy.ckpt"
    if cfg.run_mode == "eval":
        if cfg.load_checkpoint is None:
            raise ConfigError("a checkpoint is required for run_mode=eval", key="load_checkpoint")
        ms.load_param_into_net(network, ms.load_checkpoint(cfg.load_checkpoint))
        acc, whole = copy_accuracy(network, eval_source, eval_target)
        if is_main_process():
            print(f"copy_acc {acc:.4f} sequences_copied {whole:.4f}")
        return {"copy_acc": acc, "sequences_copied": whole}
    start = time.perf_counter()
    log = _train(cfg, network, groups)
    seconds = time.perf_counter() - start
    acc, whole = copy_accuracy(network, eval_source, eval_target)
    if groups is None or groups.dp_rank == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        ms.save_checkpoint(network, str(path))
    if is_main_process():
        _log.info("greedy copy accuracy %.4f, sequences copied whole %.4f", acc, whole)
        history = {"records": log.records, "step_loss": log.step_losses, "copy_acc": acc}
        write_bytes_atomically(path.parent / "history.json", json.dumps(history, indent=1).encode())
        from mstrain.gnn.plot import plot_history
        plot_history(path.parent / "curves.png", log.records)
    return {"copy_acc": acc, "sequences_copied": whole, "train_loss": log.records[-1]["train_loss"],
            "seconds": round(seconds, 2), "target_tokens_per_s": log.records[-1]["target_tokens_per_s"],
            "output_dir": cfg.train.output_dir}
