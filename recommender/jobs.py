"""Job `widedeep`: Wide&Deep on Criteo from a YAML config.

    mstrain --config configs/widedeep_criteo.yaml [train.epochs=3 data.threshold=10 optimizer.deep=adam ...]

Preprocesses the Criteo TSV into record files when `data.records_dir` does not hold them for the
configured options, trains with `Model.train` over `MindDataset` (FTRL on the wide part, Adam or
LazyAdam on the deep part), evaluates on the test split after every epoch (one line: loss, AUC,
logloss) and writes to `train.output_dir`: history.json, summary.json and roc.png (the ROC
curve of the last epoch). The job returns the final test AUC and logloss.

With `model.shard_tables` (under `mpiexec -n N`) both tables are sharded over the ranks, each
rank's shard behind its own hot-row cache with `model.vocab_cache_size` and in files with
`model.disk_dir`; every rank reads the same shuffled batches of `train.batch_size` samples and
trains on its 1/N slice, so a run gives the same numbers on any rank count (up to float
summation order; dropout draws per rank). `train.checkpoint_dir` then saves the run every
`train.checkpoint_steps` steps (`run_checkpoint`), and `train.resume` continues one, saved on any
rank count, exactly where it stopped.
"""
import os
import time
import warnings
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

import mstrain as ms
from mstrain import Model
from mstrain import dataset as ds
from mstrain.config import option, resolve_path, section
from mstrain.errors import ConfigError
from mstrain.fileio import write_json_atomically
from mstrain.log import get_logger
from mstrain.mindrecord import RecordSet
from mstrain.registry import register_job
from mstrain.train.callback import Callback
from mstrain.train import resume_position
from mstrain.train.metrics import AUC

from .criteo import load_vocab, preprocess_criteo
from .roc import log_loss, plot_roc, roc_curve
from .prefetch import prefetch_rows
from .run_checkpoint import ShardedRunCheckpoint, restore_sharded_run
from .store import EmbeddingCacheMonitor
from .widedeep import (WideDeep, WideDeepTrainStep, WideDeepWithLoss, parameter_count, predict_logits,
                       sharded_train_step, wide_deep_optimizers)

__all__ = ["WideDeepJobConfig", "run_widedeep", "train_widedeep"]


@dataclass
class CriteoData:
    """The Criteo TSV and its preprocessed record files."""
    source: str = option("data/criteo/criteo_train_sample.txt", "labelled Criteo TSV file (relative to cwd or the repo root)")
    records_dir: str = option("outputs/criteo_records", "directory of train/test record files and vocab.json; "
                              "(re)built when missing or made with other options")
    threshold: int = option(20, "min count of a categorical value in the training lines to get its own id", low=1)
    dense_bins: int = option(16, "quantile bins per integer field for the wide part (0: none)", low=0)
    train_fraction: float = option(0.8, "leading fraction of the lines that train; the rest test",
                                   low=0.01, high=0.99)
    strict: bool = option(False, "refuse the file at its first malformed line (file:line) instead of skipping")


@dataclass
class WideDeepModelConfig:
    """Wide&Deep: per-id scalar weights + dense linear (wide), embeddings + MLP (deep)."""
    embed_dim: int = option(16, "embedding width of each categorical field", low=1)
    hidden: Tuple[int, ...] = option((256, 128, 64), "deep MLP hidden sizes (input 26 * embed_dim + 13, output 1)")
    dropout: float = option(0.2, "dropout after each hidden layer of the deep MLP", low=0.0, high=0.99)
    init_std: float = option(0.01, "standard deviation of the initial embeddings", low=0.0)
    l2_wide: float = option(0.0, "L2 on the wide weights of the batch's ids", low=0.0)
    l2_deep: float = option(0.0, "L2 on the batch's embedding rows and the MLP weights", low=0.0)
    vocab_cache_size: int = option(0, "rows of each table in the hot-row cache the step trains (0: whole tables "
                                   "in the step; else >= a batch's distinct ids, tables kept in the store); "
                                   "with shard_tables: rows of each rank's shard, cached on that rank", low=0)
    cache_policy: str = option("lru", "eviction of the hot-row cache", choices=("lru", "lfu"))
    disk_dir: Optional[str] = option(None, "keep the cached tables and their optimizer state in files here "
                                     "(level 3, read and written row by row) instead of host memory; "
                                     "with shard_tables each rank uses its subdirectory rank<r>")
    prefetch_rows: bool = option(True, "with vocab_cache_size: while a step computes, read the rows the next "
                                 "batch misses from the host or disk level (results unchanged)")
    shard_tables: bool = option(False, "shard both tables row-wise over the MPI ranks (run under mpiexec -n N; "
                                "rows fetched by all-to-all); each rank trains on 1/N of every batch")


@dataclass
class WideDeepOptimizer:
    """FTRL on the wide part, Adam or LazyAdam on the deep part (the model zoo's pairing)."""
    wide_lr: float = option(0.02, "FTRL learning rate", low=0.0)
    wide_l1: float = option(1e-8, "FTRL L1", low=0.0)
    wide_l2: float = option(1e-8, "FTRL L2", low=0.0)
    wide_initial_accum: float = option(1.0, "FTRL initial accumulator", low=0.0)
    deep: str = option("lazy_adam", "deep optimizer", choices=("lazy_adam", "adam"))
    deep_lr: float = option(5e-4, "deep optimizer learning rate", low=0.0)
    eps: float = option(1e-8, "Adam epsilon", low=0.0)


@dataclass
class WideDeepTrain:
    """Epochs, batch, seed, outputs."""
    epochs: int = option(4, "passes over the training split", low=1)
    batch_size: int = option(128, "samples per step (with model.shard_tables: of all ranks together, "
                             "a multiple of the rank count)", low=1)
    seed: int = option(0, "seed of the parameters, shuffling and dropout", low=0)
    shuffle: bool = option(True, "shuffle the training split every epoch")
    dataset_sink_mode: bool = option(False, "feed each epoch's batches through the sink queue (Model.train's "
                                     "dataset_sink_mode; steps of cached tables run eagerly)")
    output_dir: str = option("outputs/widedeep_criteo", "directory for history.json, summary.json, roc.png")
    checkpoint_dir: Optional[str] = option(None, "with model.shard_tables: save the run here (sharded tables, "
                                           "dense part, position); resumable on any rank count")
    checkpoint_steps: int = option(0, "save every this many global steps (0: at each epoch end)", low=0)
    checkpoint_keep: int = option(2, "newest saves kept in checkpoint_dir", low=1)
    resume: Optional[str] = option(None, "continue a run saved in checkpoint_dir: 'latest', or the path of "
                                   "one of its step-<n> directories")


@dataclass
class WideDeepJobConfig:
    """Config of the widedeep job."""
    job: str = option("widedeep", "the registered job this config runs")
    train: WideDeepTrain = section(WideDeepTrain)
    optimizer: WideDeepOptimizer = section(WideDeepOptimizer)
    data: CriteoData = section(CriteoData)
    model: WideDeepModelConfig = section(WideDeepModelConfig)


def ensure_records(data):
    """The vocab summary of `data.records_dir`, preprocessing `data.source` first when the
    directory lacks the files or they were made from another file or with other options. A relative
    `data.source` is looked up in the working directory, then in the checkout (the shipped sample)."""
    source = str(resolve_path(data.source, "Criteo file", key="data.source"))
    wanted = {"source": os.path.abspath(source), "threshold": data.threshold, "dense_bins": data.dense_bins,
              "train_fraction": data.train_fraction}
    vocab_path = os.path.join(data.records_dir, "vocab.json")
    if os.path.isfile(vocab_path):
        vocab = load_vocab(data.records_dir)
        complete = all(os.path.isfile(os.path.join(data.records_dir, f"{p}.mindrecord")) for p in ("train", "test"))
        if complete and all(vocab.get(k) == v for k, v in wanted.items()):
            return vocab
    get_logger("recommender").info("preprocessing %s into %s", source, data.records_dir)
    return preprocess_criteo(source, data.records_dir, threshold=data.threshold, dense_bins=data.dense_bins,
                             train_fraction=data.train_fraction, strict=data.strict)


def _columns(vocab):
    return ["dense", "ids"] + (["dense_ids"] if vocab["dense_bins"] else []) + ["label"]


class EvaluateEachEpoch(Callback):
    """After every epoch: logits on the test split, AUC and logloss, one log line."""

    def __init__(self, network, test_columns, history, batch_size=4096):
        super().__init__()
        self.network, self.test, self.history, self.batch_size = network, test_columns, history, batch_size
        self.last_logits = None

    def on_train_epoch_end(self, run_context):
        args = run_context.original_args()
        start = time.perf_counter()
        logits = predict_logits(self.network, self.test["dense"], self.test["ids"], self.test.get("dense_ids"),
                                batch_size=self.batch_size)
        metric = AUC()
        metric.update(logits, self.test["label"])
        record = {"epoch": args.cur_epoch_num, "step": args.cur_step_num, "train_loss": float(np.asarray(args.net_outputs.asnumpy())),
                  "test_auc": float(metric.eval()), "test_logloss": log_loss(self.test["label"], logits),
                  "eval_s": round(time.perf_counter() - start, 3)}
        self.history.append(record)
        self.last_logits = logits
        get_logger("recommender").info("epoch %d: train loss %.4f, test AUC %.4f, test logloss %.4f",
                                       record["epoch"], record["train_loss"], record["test_auc"],
                                       record["test_logloss"])


def train_widedeep(cfg):
    """Train and evaluate Wide&Deep as `cfg` (a WideDeepJobConfig) says; returns the summary dict."""
    ms.set_seed(cfg.train.seed)
    rank, ranks = _ranks(cfg)
    vocab = ensure_records(cfg.data) if rank == 0 else None
    vocab = _shared(vocab, ranks)
    columns = _columns(vocab)
    train_set = _train_set(cfg, columns, rank, ranks)
    test_records = RecordSet(os.path.join(cfg.data.records_dir, "test.mindrecord"))
    test = test_records.gather(np.arange(test_records.num_rows), columns, as_numpy=True)
    batch_ids = cfg.train.batch_size * (26 + 13) if cfg.model.shard_tables else 0
    disk_dir = cfg.model.disk_dir
    if disk_dir is not None and cfg.model.shard_tables:
        disk_dir = os.path.join(disk_dir, f"rank{rank}")
    net = WideDeep(vocab["num_rows"], embed_dim=cfg.model.embed_dim, hidden=tuple(cfg.model.hidden),
                   dropout=cfg.model.dropout, init_std=cfg.model.init_std,
                   vocab_cache_size=min(cfg.model.vocab_cache_size, vocab["num_rows"]),
                   cache_policy=cfg.model.cache_policy, disk_dir=disk_dir, shard_batch_ids=batch_ids)
    step = _train_step(cfg, net)
    if cfg.model.prefetch_rows and net.cached_tables():
        wide_columns = ("ids", "dense_ids") if "dense_ids" in columns else ("ids",)
        train_set = prefetch_rows(train_set, {net.embedding: ("ids",), net.wide_weight: wide_columns})
    tables = {"deep": net.embedding, "wide": net.wide_weight}
    resume_from, history = None, []
    if cfg.train.resume:
        resume_from, history = restore_sharded_run(cfg.train.checkpoint_dir, cfg.train.resume, step, tables)
    evaluate = EvaluateEachEpoch(net, test, history, batch_size=cfg.train.batch_size if batch_ids else 4096)
    cache_monitor = EmbeddingCacheMonitor(net.table_caches())
    callbacks = [evaluate, cache_monitor]
    if cfg.train.checkpoint_dir:
        callbacks.append(ShardedRunCheckpoint(cfg.train.checkpoint_dir, step, tables, cfg.train.checkpoint_steps,
                                              cfg.train.checkpoint_keep, history))
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "GraphSinkRunner")  # cached tables decide rows on the host
        Model(step).train(cfg.train.epochs, train_set, callbacks=callbacks,
                          dataset_sink_mode=cfg.train.dataset_sink_mode, resume_from=resume_from)
    seconds = time.perf_counter() - start
    if rank != 0:
        return {"test_auc": history[-1]["test_auc"], "rank": rank}
    if resume_from is None:
        samples = vocab["train_rows"] * len(history)
    else:  # this run's steps only
        samples = (history[-1]["step"] - resume_position(resume_from).step) * cfg.train.batch_size
    return _write_outputs(cfg, vocab, history, test["label"], evaluate.last_logits, net, (samples, seconds),
                          cache_monitor.report(), ranks)


def _train_set(cfg, columns, rank, ranks):
    """The training batches of this rank: with N ranks, every rank reads the same shuffled
    batches and keeps its 1/N slice of each, so the run does not depend on the rank count."""
    path = os.path.join(cfg.data.records_dir, "train.mindrecord")
    batches = ds.MindDataset(path, columns_list=columns, shuffle=cfg.train.shuffle, num_shards=1, shard_id=0).batch(
        cfg.train.batch_size, drop_remainder=cfg.model.shard_tables)
    if ranks == 1:
        return batches
    part = cfg.train.batch_size // ranks
    rows = slice(rank * part, (rank + 1) * part)
    return batches.map(lambda *values: tuple(v[rows] for v in values), input_columns=columns)


def _ranks(cfg):
    if cfg.model.disk_dir is not None and not cfg.model.vocab_cache_size:
        raise ConfigError("model.disk_dir keeps the rows outside the hot-row cache: set model.vocab_cache_size "
                          "too", key="model.disk_dir")
    if (cfg.train.checkpoint_dir or cfg.train.resume) and not cfg.model.shard_tables:
        raise ConfigError("train.checkpoint_dir and train.resume save and load sharded tables: set "
                          "model.shard_tables=true (plain python runs it on one rank)", key="train.checkpoint_dir")
    if cfg.train.resume and not cfg.train.checkpoint_dir and cfg.train.resume == "latest":
        raise ConfigError("train.resume=latest needs train.checkpoint_dir", key="train.resume")
    if not cfg.model.shard_tables:
        return 0, 1
    from mstrain import communication as comm
    comm.init()
    ranks = comm.get_group_size()
    if cfg.train.batch_size % ranks:
        raise ConfigError(f"train.batch_size={cfg.train.batch_size} is not a multiple of the {ranks} ranks "
                          f"(each rank trains on an equal slice of every batch)", key="train.batch_size")
    return comm.get_rank(), ranks


def _shared(vocab, ranks):
    """Rank 0 preprocesses; the others receive its vocabulary summary."""
    if ranks == 1:
        return vocab
    from mstrain.communication import broadcast_object
    return broadcast_object(vocab)


def _train_step(cfg, net):
    opt, loss = cfg.optimizer, WideDeepWithLoss(net, cfg.model.l2_wide, cfg.model.l2_deep)
    settings = dict(wide_lr=opt.wide_lr, wide_l1=opt.wide_l1, wide_l2=opt.wide_l2,
                    wide_initial_accum=opt.wide_initial_accum, deep_optimizer=opt.deep, deep_lr=opt.deep_lr,
                    eps=opt.eps)
    if cfg.model.shard_tables:
        return sharded_train_step(net, loss, **settings)
    return WideDeepTrainStep(loss, *wide_deep_optimizers(net, **settings))


def _write_outputs(cfg, vocab, history, labels, logits, net, samples_and_seconds, cache_statistics, ranks):
    samples, seconds = samples_and_seconds
    out = cfg.train.output_dir
    os.makedirs(out, exist_ok=True)
    fpr, tpr = roc_curve(labels, logits)
    plot_roc(os.path.join(out, "roc.png"), [(fpr, tpr)])
    last = history[-1]
    summary = {"test_auc": last["test_auc"], "test_logloss": last["test_logloss"], "epochs": len(history),
               "train_rows": vocab["train_rows"], "test_rows": vocab["test_rows"], "table_rows": vocab["num_rows"],
               "parameters": parameter_count(net), "train_seconds": round(seconds, 2),
               "samples_per_s": round(samples / seconds, 1), "ranks": ranks,
               "output_dir": out}
    if cache_statistics:
        summary["embedding_cache"] = cache_statistics
    write_json_atomically(os.path.join(out, "history.json"), history)
    write_json_atomically(os.path.join(out, "summary.json"), summary)
    get_logger("recommender").info("widedeep: test AUC %.4f, logloss %.4f after %d epoch(s); ROC curve in %s",
                                   summary["test_auc"], summary["test_logloss"], len(history),
                                   os.path.join(out, "roc.png"))
    return summary


@register_job("widedeep", schema=WideDeepJobConfig)
def run_widedeep(cfg):
    """Wide&Deep on the Criteo sample: FTRL wide, LazyAdam deep; test AUC and logloss per epoch."""
    return train_widedeep(cfg)
