"""Job `gpt_char`: a character GPT on the shipped tinyshakespeare, on 1 to N ranks.

    mstrain --config configs/gpt_char.yaml
    mpiexec -n 4 mstrain --config gpt_char parallel_config.data_parallel=2 parallel_config.model_parallel=2
    mstrain --config gpt_char run_mode=predict load_checkpoint=outputs/gpt_char/gpt_char.ckpt prompt="ROMEO:"

Train: progress lines (step, loss, tokens/s) once per sink, validation loss every eval_every steps;
writes to train.output_dir: gpt_char.ckpt (the full weights, merged from every rank's shard in
shards/ on several ranks; it loads on any layout), tokenizer.json, history.json and loss_curve.png. Eval prints the validation loss and perplexity;
predict prints the generated text. The layout is checked before any weight is allocated.
"""
import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

import mstrain as ms
from mstrain import Model, Tensor
from mstrain import communication as comm
from mstrain import dataset as ds
from mstrain.communication.transport import all_gather_object, all_reduce_array
from mstrain.errors import ConfigError
from mstrain.fileio import write_bytes_atomically
from mstrain.jobs.common import build_optimizer
from mstrain.log import get_logger, is_main_process
from mstrain.parallel import parallel_groups, set_auto_parallel_context
from mstrain.parallel.checkpoint import merge_checkpoints, save_distributed_checkpoint
from mstrain.registry import register_job
from mstrain.train.callback import Callback

from .config import GPTJobConfig, announce_layout, check_parallel_layout, search_layout
from .data import load_text_splits, training_windows, validation_windows
from .gpt import GPT, GPTConfig, GPTLoss
from .stages import TiedPipelineTrainOneStepCell, build_pipeline

__all__ = ["run_gpt_char", "evaluate_loss", "evaluate_pipeline", "decay_groups"]

_log = get_logger("transformer")


def _gpt_config(cfg, vocab_size):
    m = cfg.model
    return GPTConfig(vocab_size=vocab_size, num_layers=m.num_layers, num_heads=m.num_heads, hidden_size=m.hidden_size,
                     seq_length=m.seq_length, ffn_hidden_size=m.ffn_hidden_size,
                     vocab_pad_multiple=m.vocab_pad_multiple, layernorm_epsilon=m.layernorm_epsilon,
                     init_std=m.init_std)


def _resolve_auto(cfg, gpt_config):
    """parallel_config=auto: the strategy search's layout for these ranks, printed in one line."""
    if cfg.parallel_config != "auto":
        return cfg
    comm.init()
    cfg, best = search_layout(cfg, comm.get_group_size(), gpt_config.padded_vocab_size)
    announce_layout(cfg, best)
    return cfg


def _setup_layout(cfg, gpt_config):
    """Check the layout against the ranks (before any weight exists), then set the parallel context."""
    comm.init()
    ranks = comm.get_group_size()
    check_parallel_layout(cfg, ranks, gpt_config.padded_vocab_size)
    p = cfg.parallel_config
    if ranks == 1 and p.micro_batch_num == 1:
        set_auto_parallel_context(parallel_mode="stand_alone")
        return None
    set_auto_parallel_context(parallel_mode="hybrid_parallel" if ranks > 1 else "stand_alone",
                              model_parallel=p.model_parallel, pipeline_stages=p.pipeline_stage,
                              micro_batch_num=p.micro_batch_num, enable_parallel_optimizer=p.optimizer_shard,
                              gradients_mean=True)
    return parallel_groups()


def decay_groups(network, weight_decay):
    """nanoGPT's rule: weight decay on matrices and embeddings, none on biases and norm gains."""
    params = network.trainable_params()
    return [{"params": [p for p in params if len(p.shape) >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if len(p.shape) < 2], "weight_decay": 0.0}]


def evaluate_loss(network, loss_fn, inputs, labels, groups=None, batch=32):
    """Mean loss over the (windows, T) arrays; windows split over data-parallel ranks when `groups`."""
    count = len(inputs)
    shard, shards = (0, 1) if groups is None else (groups.dp_rank, groups.data_parallel)
    network.set_train(False)
    total = np.zeros(2, np.float64)  # loss sum, windows
    with ms.no_grad():
        for first in range(shard * batch, count, batch * shards):
            rows = slice(first, min(first + batch, count))
            loss = loss_fn(network(Tensor(inputs[rows])), Tensor(labels[rows]))
            total += (float(loss.asnumpy()) * (rows.stop - rows.start), rows.stop - rows.start)
    network.set_train(True)
    if groups is not None and groups.data_parallel > 1:
        total = all_reduce_array(total, groups.data, "sum")
    return float(total[0] / total[1])


def evaluate_pipeline(pipeline, inputs, labels, groups, per_micro_batch=8):
    """Mean loss through the stages (every stage gets it); the windows past the last whole group of
    micro_batch_num are left out, as the pipeline splits each batch evenly."""
    micro = pipeline.micro_batch_num
    batch = micro * per_micro_batch
    count = len(inputs) // micro * micro
    shard, shards = groups.dp_rank, groups.data_parallel
    pipeline.set_train(False)
    total = np.zeros(2, np.float64)
    for first in range(shard * batch, count, batch * shards):
        rows = slice(first, min(first + batch, count))
        loss = pipeline(Tensor(inputs[rows]), Tensor(labels[rows]))
        total += (float(loss.asnumpy()) * (rows.stop - rows.start), rows.stop - rows.start)
    pipeline.set_train(True)
    if shards > 1:
        total = all_reduce_array(total, groups.data, "sum")
    return float(total[0] / total[1])


class _Progress(Callback):
    """Every sink_size steps (once per sink in sink mode): the mean loss of those steps over every
    replica, tokens/s, and every eval_every steps the validation loss; keeps the history for
    history.json and the PNG."""

    def __init__(self, cfg, evaluate, groups, tokens_per_step):
        self.cfg, self.evaluate, self.groups = cfg, evaluate, groups
        self.tokens_per_step, self.records, self.step_losses = tokens_per_step, [], []
        self._pending, self._start, self._last_eval = [], None, 0

    def on_train_begin(self, run_context):
        self._start = time.perf_counter()

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        self._pending += [float(np.asarray(o.asnumpy() if hasattr(o, "asnumpy") else o))
                          for o in (args.step_outputs or [args.net_outputs])]
        step = args.cur_step_num
        if step % self.cfg.train.sink_size == 0 or step >= self.cfg.train.steps:
            self._record(step)

    def _record(self, step):
        losses, self._pending = np.asarray(self._pending, np.float64), []
        if self.groups is not None and self.groups.data_parallel > 1:
            losses = all_reduce_array(losses, self.groups.data, "sum") / self.groups.data_parallel
        self.step_losses.extend(float(v) for v in losses)
        seconds, self._start = time.perf_counter() - self._start, time.perf_counter()
        record = {"epoch": step, "step": step, "train_loss": float(losses.mean()),
                  "tokens_per_s": round(self.tokens_per_step * len(losses) / seconds, 1)}
        every, last = self.cfg.train.eval_every, step >= self.cfg.train.steps
        if last or (every and step - self._last_eval >= every):
            record["val_loss"], self._last_eval = self.evaluate(), step
        self.records.append(record)
        if is_main_process():
            val = f" val_loss {record['val_loss']:.4f}" if "val_loss" in record else ""
            _log.info("step %d/%d loss %.4f %.0f tokens/s%s", step, self.cfg.train.steps, record["train_loss"],
                      record["tokens_per_s"], val)
        self._start = time.perf_counter()  # evaluation time is not training time


def _checkpoint_path(cfg):
    return Path(cfg.train.output_dir) / "gpt_char.ckpt"


def _load_weights(network, path, groups, run_mode):
    """Load a full checkpoint (any layout wrote it) into this rank's network: sharded parameters
    take their block through their layout."""
    if path is None:
        raise ConfigError(f"a checkpoint is required for run_mode={run_mode}", key="load_checkpoint")
    if not Path(path).is_file():
        raise ConfigError(f"{path} not found", key="load_checkpoint")
    saved = ms.load_checkpoint(str(path))
    missing = [name for name, _ in network.parameters_and_names() if name not in saved]
    if missing:
        raise ConfigError(f"{path} lacks parameters {missing[:3]} (a different model shape?)", key="load_checkpoint")
    for name, param in network.parameters_and_names():
        full = saved[name].asnumpy()
        layout = getattr(param, "layout", None)
        block = layout.shard(full, groups.rank) if layout is not None and groups is not None else full
        if tuple(block.shape) != tuple(param.shape):
            raise ConfigError(f"{path}: {name} has shape {full.shape}, the model needs {tuple(param.shape)}",
                              key="load_checkpoint")
        param.set_data(block)


def _train(cfg, network, groups, splits):
    train_ids, val_ids = splits
    t = cfg.train
    dp = 1 if groups is None else groups.data_parallel
    per_rank = t.batch_size // dp
    inputs, labels = training_windows(train_ids, t.steps, t.batch_size, cfg.model.seq_length, t.seed)
    rows = slice(0, per_rank) if groups is None else slice(groups.dp_rank * per_rank, (groups.dp_rank + 1) * per_rank)
    flat = lambda a: a[:, rows].reshape(-1, cfg.model.seq_length)  # noqa: E731
    data = ds.NumpySlicesDataset({"input_ids": flat(inputs), "labels": flat(labels)}, shuffle=False,
                                 num_shards=1, shard_id=0).batch(per_rank)
    val_inputs, val_labels = validation_windows(val_ids, cfg.model.seq_length)
    if t.eval_windows:
        val_inputs, val_labels = val_inputs[:t.eval_windows], val_labels[:t.eval_windows]
    loss_fn = GPTLoss(network)
    if cfg.recompute_config.recompute:
        for block in network.blocks:
            block.recompute()
    staged = groups is not None and (groups.pipeline_stages > 1 or cfg.parallel_config.micro_batch_num > 1)
    if staged:
        pipeline, tied, tie_group = build_pipeline(network, loss_fn, groups, cfg.parallel_config.micro_batch_num)
        optimizer = build_optimizer(cfg.optimizer, decay_groups(pipeline, cfg.optimizer.weight_decay), t.steps)
        model = Model(TiedPipelineTrainOneStepCell(pipeline, optimizer, tied, tie_group))
        evaluate = lambda: evaluate_pipeline(pipeline, val_inputs, val_labels, groups)  # noqa: E731
        saved = pipeline
    else:
        optimizer = build_optimizer(cfg.optimizer, decay_groups(network, cfg.optimizer.weight_decay), t.steps)
        model = Model(network, loss_fn, optimizer)
        evaluate = lambda: evaluate_loss(network, loss_fn, val_inputs, val_labels, groups)  # noqa: E731
        saved = network
    progress = _Progress(cfg, evaluate, groups, t.batch_size * cfg.model.seq_length)
    sink = t.dataset_sink_mode and not staged and (groups is None or groups.model_parallel == 1)
    sink_size = min(t.sink_size, t.steps)
    if t.steps % sink_size:
        raise ConfigError(f"train.sink_size ({t.sink_size}) must divide train.steps ({t.steps})", key="train.sink_size")
    save = _Saver(saved, _checkpoint_path(cfg), groups, t.checkpoint_every, t.steps)
    start = time.perf_counter()
    if sink:
        model.train(t.steps // sink_size, data, callbacks=[progress, save], dataset_sink_mode=True, sink_size=sink_size)
    else:
        model.train(1, data, callbacks=[progress, save], dataset_sink_mode=False)
    return progress, time.perf_counter() - start, saved


class _Saver(Callback):
    """Writes the weights every `every` steps and at the end to `path`. On several ranks every rank
    writes its shard and the layouts (core's distributed checkpoint, in path's `shards/` folder) and
    rank 0 merges them into the one full checkpoint `path`, which loads on any layout."""

    def __init__(self, cell, path, groups, every, steps):
        self.cell, self.path, self.groups, self.every, self.steps = cell, path, groups, every, steps
        self._last = 0

    def on_train_step_end(self, run_context):
        step = run_context.original_args().cur_step_num
        if step >= self.steps or (self.every and step - self._last >= self.every):
            self._last = step
            self.save()

    def save(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.groups is None or self.groups.world.size == 1:
            ms.save_checkpoint(self.cell, str(self.path))
            return
        shards = self.path.parent / "shards"
        save_distributed_checkpoint(self.cell, shards)  # collective; ends with a barrier
        if comm.get_rank() == 0:
            merge_checkpoints(shards, str(self.path))
        comm.barrier()


def _write_outputs(cfg, progress, tokenizer, gpt_config):
    out = Path(cfg.train.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(out / "tokenizer.json")
    write_bytes_atomically(out / "config.json", json.dumps(gpt_config.to_dict(), indent=1).encode())
    history = {"records": progress.records, "step_loss": progress.step_losses}
    write_bytes_atomically(out / "history.json", json.dumps(history, indent=1).encode())
    from mstrain.gnn.plot import plot_history
    curve = [r for r in progress.records if "val_loss" in r] if len(progress.records) < 2 else progress.records
    points = [dict(r, val_loss=r.get("val_loss", r["train_loss"])) for r in curve]
    plot_history(out / "loss_curve.png", points)


@register_job("gpt_char", schema=GPTJobConfig)
def run_gpt_char(cfg):
    """Character GPT on tinyshakespeare: train, finetune, eval or predict, on 1 to N ranks."""
    train_ids, val_ids, tokenizer = load_text_splits(cfg.data.path)
    gpt_config = _gpt_config(cfg, tokenizer.vocab_size)
    cfg = _resolve_auto(cfg, gpt_config)
    groups = _setup_layout(cfg, gpt_config)
    ms.set_seed(cfg.train.seed)
    network = GPT(gpt_config, groups)
    if cfg.run_mode != "train":
        _load_weights(network, cfg.load_checkpoint, groups, cfg.run_mode)
    if cfg.run_mode == "predict":
        return _predict(cfg, network, tokenizer)
    if cfg.run_mode == "eval":
        val_inputs, val_labels = validation_windows(val_ids, cfg.model.seq_length)
        if cfg.train.eval_windows:
            val_inputs, val_labels = val_inputs[:cfg.train.eval_windows], val_labels[:cfg.train.eval_windows]
        loss = evaluate_loss(network, GPTLoss(network), val_inputs, val_labels, groups)
        if is_main_process():
            print(f"val_loss {loss:.4f} perplexity {math.exp(loss):.3f}")
        return {"val_loss": loss, "perplexity": math.exp(loss)}
    progress, seconds, trained = _train(cfg, network, groups, (train_ids, val_ids))
    memory = _memory_per_rank(trained)
    if is_main_process():
        _write_outputs(cfg, progress, tokenizer, gpt_config)
        for rank, (rss, params) in enumerate(memory):
            _log.info("rank %d: peak resident memory %.1f MiB, trained parameters %.2f MiB", rank, rss, params)
    last = progress.records[-1]
    tokens_per_s = cfg.train.steps * cfg.train.batch_size * cfg.model.seq_length / seconds
    return {"val_loss": last["val_loss"], "train_loss": last["train_loss"],
            "tokens_per_s": round(tokens_per_s, 1), "seconds": round(seconds, 2),
            "peak_rss_mib": [m[0] for m in memory], "parameter_mib": [m[1] for m in memory],
            "parallel_config": asdict(cfg.parallel_config), "recompute": cfg.recompute_config.recompute,
            "output_dir": cfg.train.output_dir}


def _memory_per_rank(cell):
    """[(peak resident MiB, MiB of the parameters this rank trains)] for every rank."""
    import resource
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    params = sum(p.asnumpy().nbytes for p in cell.trainable_params()) / 2 ** 20
    mine = (round(rss, 1), round(params, 3))
    return all_gather_object(mine) if comm.get_group_size() > 1 else [mine]


def _predict(cfg, network, tokenizer):
    prompt_ids = tokenizer.encode(cfg.prompt)
    if prompt_ids.size == 0:
        raise ConfigError("the prompt is empty", key="prompt")
    ids = network.generate(prompt_ids, cfg.max_new_tokens, do_sample=cfg.do_sample, temperature=cfg.temperature,
                           top_k=cfg.top_k, top_p=cfg.top_p, seed=cfg.train.seed)
    text = tokenizer.decode(ids)
    if is_main_process():
        print(text)
    return {"text": text}

