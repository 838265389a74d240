"""Job `vit_mnist`: a ViT (W7 shape) on the shipped MNIST images, on 1 to N ranks.

    mstrain --config configs/vit_mnist.yaml
    mpiexec -n 2 mstrain --config vit_mnist parallel_config.model_parallel=2

Data: the first data.train_size images train, the last data.test_size test (mlp_mnist's loader:
pixels in [0, 1] standardised). Each epoch takes the batches of numpy.random.default_rng(seed)
.permutation(train_size) in order (the peer's batches). Writes to train.output_dir: vit_mnist.ckpt
(per model slice `vit_mnist_rank<m>.ckpt`), history.json and curves.png; returns the test accuracy.
"""
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Union

import numpy as np

import mstrain as ms
from mstrain import Model, Tensor, nn
from mstrain import communication as comm
from mstrain import dataset as ds
from mstrain.communication.transport import all_reduce_array
from mstrain.config import OptimizerConfig, option, section
from mstrain.errors import ConfigError, ParallelConfigError
from mstrain.fileio import write_bytes_atomically
from mstrain.jobs.common import build_optimizer
from mstrain.jobs.mlp_mnist import load_mnist
from mstrain.log import get_logger, is_main_process
from mstrain.parallel import parallel_groups, set_auto_parallel_context
from mstrain.registry import register_job
from mstrain.train.callback import Callback

from .config import RecomputeConfig, announce_layout, resolve_auto_layout
from .vit import ViT, ViTConfig

__all__ = ["ViTJobConfig", "run_vit_mnist", "accuracy"]

_log = get_logger("transformer")


@dataclass
class ViTModelConfig:
    """ViT shape (patch embedding, class token, learned positions, pre-LN blocks)."""
    patch_size: int = option(4, "side of the square patches (28 must be a multiple)", low=1)
    hidden_size: int = option(128, "model width", low=1)
    num_layers: int = option(4, "encoder blocks", low=1)
    num_heads: int = option(4, "attention heads", low=1)
    ffn_hidden_size: int = option(256, "MLP hidden units", low=1)
    init_std: float = option(0.02, "std of the N(0, std) initialisation", low=0.0)


@dataclass
class ViTTrain:
    """Epochs, batches, sinking, evaluation, outputs."""
    epochs: int = option(10, "passes over the training images", low=1)
    batch_size: int = option(64, "global batch (images per step over all data-parallel ranks)", low=1)
    seed: int = option(0, "seed of the weights and of the batch order", low=0)
    dataset_sink_mode: bool = option(True, "run each epoch as one compiled sink (model_parallel 1)")
    eval_every: int = option(1, "epochs between test accuracies; 0 = at the end only", low=0)
    output_dir: str = option("outputs/vit_mnist", "directory for the checkpoint, history.json, curves.png")


@dataclass
class MnistImages:
    """The MNIST .npz and its split."""
    path: str = option("data/images/mnist/mnist_test10k.npz", ".npz with x (N, 28, 28) uint8 and y (N,)")
    train_size: int = option(8000, "first N images train", low=1)
    test_size: int = option(2000, "last N images test", low=1)


@dataclass
class ViTParallelLayout:
    """How the ranks split the model (MindFormers' parallel_config)."""
    data_parallel: int = option(1, "data-parallel replicas; each reads batch_size / data_parallel images", low=1)
    model_parallel: int = option(1, "tensor-parallel degree of the encoder blocks (heads and MLP units)", low=1)
    optimizer_shard: bool = option(False, "shard the optimizer state over the data-parallel ranks (ZeRO-1)")


@dataclass
class ViTJobConfig:
    """Config of the vit_mnist job."""
    job: str = option("", "the registered job this config runs (mstrain list shows them)")
    run_mode: str = option("train", "train, or eval (test accuracy of load_checkpoint)", choices=("train", "eval"))
    load_checkpoint: Optional[str] = option(None, "checkpoint to evaluate (run_mode eval)")
    model: ViTModelConfig = section(ViTModelConfig)
    train: ViTTrain = section(ViTTrain)
    optimizer: OptimizerConfig = section(OptimizerConfig)
    data: MnistImages = section(MnistImages)
    parallel_config: Union[Literal["auto"], ViTParallelLayout] = section(
        ViTParallelLayout, "how the ranks split the model (data_parallel, model_parallel, optimizer_shard), or auto: "
                           "the strategy search picks them for the ranks and the model")
    recompute_config: RecomputeConfig = section(RecomputeConfig)


def _check_layout(cfg, ranks):
    p, m = cfg.parallel_config, cfg.model
    if p.data_parallel * p.model_parallel != ranks:
        raise ParallelConfigError(f"parallel_config.data_parallel ({p.data_parallel}) x parallel_config.model_parallel "
                                  f"({p.model_parallel}) = {p.data_parallel * p.model_parallel} must equal the number "
                                  f"of ranks ({ranks})")
    for key, value in (("model.num_heads", m.num_heads), ("model.ffn_hidden_size", m.ffn_hidden_size)):
        if value % p.model_parallel:
            raise ParallelConfigError(f"{key}: {value} is not divisible by parallel_config.model_parallel "
                                      f"({p.model_parallel})")
    if m.hidden_size % m.num_heads:
        raise ParallelConfigError(f"model.hidden_size: {m.hidden_size} is not divisible by model.num_heads ({m.num_heads})")
    if 28 % m.patch_size:
        raise ConfigError(f"{m.patch_size} does not divide the 28-pixel side", key="model.patch_size")
    if cfg.train.batch_size % p.data_parallel:
        raise ParallelConfigError(f"train.batch_size: {cfg.train.batch_size} is not divisible by "
                                  f"parallel_config.data_parallel ({p.data_parallel})")


def _resolve_auto(cfg):
    """parallel_config=auto: the search's data x model split for these ranks (ViT has no pipeline)."""
    if cfg.parallel_config != "auto":
        return cfg
    from mstrain.parallel.cost_model import TransformerSpec
    comm.init()
    m = cfg.model
    # The class head (hidden x 10 on the class token only) is negligible next to the blocks, so the
    # spec has no vocabulary; the blocks see the patches and the class token.
    spec = TransformerSpec(num_layers=m.num_layers, hidden_size=m.hidden_size, num_heads=m.num_heads, vocab_size=0,
                           seq_length=(28 // m.patch_size) ** 2 + 1, batch_size=cfg.train.batch_size,
                           ffn_hidden_size=m.ffn_hidden_size)
    cfg, best = resolve_auto_layout(cfg, spec, comm.get_group_size(), lambda best: ViTParallelLayout(
        data_parallel=best.dp, model_parallel=best.mp, optimizer_shard=best.optimizer_shard), max_pipeline_stages=1)
    announce_layout(cfg, best)
    return cfg


def _setup(cfg):
    comm.init()
    ranks = comm.get_group_size()
    _check_layout(cfg, ranks)
    if ranks == 1:
        set_auto_parallel_context(parallel_mode="stand_alone")
        return None
    p = cfg.parallel_config
    set_auto_parallel_context(parallel_mode="hybrid_parallel", model_parallel=p.model_parallel,
                              enable_parallel_optimizer=p.optimizer_shard, gradients_mean=True)
    return parallel_groups()


def accuracy(network, images, labels, batch=500):
    """Fraction of images whose argmax logit is the label."""
    network.set_train(False)
    correct = 0
    with ms.no_grad():
        for first in range(0, len(images), batch):
            logits = network(Tensor(images[first:first + batch])).asnumpy()
            correct += int((logits.argmax(-1) == labels[first:first + batch]).sum())
    network.set_train(True)
    return correct / len(images)


class _EpochLog(Callback):
    def __init__(self, cfg, evaluate, groups, images_per_epoch):
        self.cfg, self.evaluate, self.groups, self.images = cfg, evaluate, groups, images_per_epoch
        self.records, self.step_losses, self._pending, self._start = [], [], [], None

    def on_train_epoch_begin(self, run_context):
        self._start = time.perf_counter()

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        self._pending += [float(np.asarray(o.asnumpy())) for o in (args.step_outputs or [args.net_outputs])]

    def on_train_epoch_end(self, run_context):
        epoch = run_context.original_args().cur_epoch_num
        seconds = time.perf_counter() - self._start
        losses, self._pending = np.asarray(self._pending, np.float64), []
        if self.groups is not None and self.groups.data_parallel > 1:
            losses = all_reduce_array(losses, self.groups.data, "sum") / self.groups.data_parallel
        self.step_losses.extend(float(v) for v in losses)
        record = {"epoch": epoch, "train_loss": float(losses.mean()), "images_per_s": round(self.images / seconds, 1)}
        every = self.cfg.train.eval_every
        if epoch == self.cfg.train.epochs or (every and epoch % every == 0):
            record["val_acc"] = self.evaluate()
        self.records.append(record)
        if is_main_process():
            acc = f" test_acc {record['val_acc']:.4f}" if "val_acc" in record else ""
            _log.info("epoch %d/%d loss %.4f %.0f images/s%s", epoch, self.cfg.train.epochs, record["train_loss"],
                      record["images_per_s"], acc)


def _checkpoint_path(cfg, groups):
    name = "vit_mnist.ckpt" if groups is None or groups.model_parallel == 1 else f"vit_mnist_rank{groups.mp_rank}.ckpt"
    return Path(cfg.train.output_dir) / name


def _train(cfg, network, groups, train, test):
    (x, y), t = train, cfg.train
    dp = 1 if groups is None else groups.data_parallel
    per_rank, steps = t.batch_size // dp, len(x) // t.batch_size
    if steps == 0:
        raise ConfigError(f"{t.batch_size} is above the {len(x)} training images", key="train.batch_size")
    order = np.random.default_rng(t.seed).permutation(len(x))[:steps * t.batch_size].reshape(steps, t.batch_size)
    rank = 0 if groups is None else groups.dp_rank
    rows = order[:, rank * per_rank:(rank + 1) * per_rank].reshape(-1)
    data = ds.NumpySlicesDataset({"image": x[rows], "label": y[rows]}, shuffle=False, num_shards=1,
                                 shard_id=0).batch(per_rank)
    if cfg.recompute_config.recompute:
        for block in network.blocks:
            block.recompute()
    optimizer = build_optimizer(cfg.optimizer, network.trainable_params(), t.epochs * steps)
    model = Model(network, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer)
    log = _EpochLog(cfg, lambda: accuracy(network, *test), groups, steps * t.batch_size)
    sink = t.dataset_sink_mode and (groups is None or groups.model_parallel == 1)
    model.train(t.epochs, data, callbacks=[log], dataset_sink_mode=sink)
    return log


@register_job("vit_mnist", schema=ViTJobConfig)
def run_vit_mnist(cfg):
    """ViT (W7) on the shipped MNIST images: test accuracy, on 1 to N ranks."""
    train, test = load_mnist(cfg.data.path, cfg.data.train_size, cfg.data.test_size)
    cfg = _resolve_auto(cfg)
    groups = _setup(cfg)
    ms.set_seed(cfg.train.seed)
    m = cfg.model
    config = ViTConfig(patch_size=m.patch_size, hidden_size=m.hidden_size, num_layers=m.num_layers,
                       num_heads=m.num_heads, ffn_hidden_size=m.ffn_hidden_size, init_std=m.init_std)
    network = ViT(config, groups)
    path = _checkpoint_path(cfg, groups)
    if cfg.run_mode == "eval":
        if cfg.load_checkpoint is None:
            raise ConfigError("a checkpoint is required for run_mode=eval", key="load_checkpoint")
        ms.load_param_into_net(network, ms.load_checkpoint(cfg.load_checkpoint))
        acc = accuracy(network, *test)
        if is_main_process():
            print(f"test_acc {acc:.4f}")
        return {"test_acc": acc}
    start = time.perf_counter()
    log = _train(cfg, network, groups, train, test)
    seconds = time.perf_counter() - start
    if groups is None or groups.dp_rank == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        ms.save_checkpoint(network, str(path))
    if is_main_process():
        history = {"records": log.records, "step_loss": log.step_losses}
        write_bytes_atomically(path.parent / "history.json", json.dumps(history, indent=1).encode())
        from mstrain.gnn.plot import plot_history
        plot_history(path.parent / "curves.png", log.records)
    last = log.records[-1]
    return {"test_acc": last["val_acc"], "train_loss": last["train_loss"], "seconds": round(seconds, 2),
            "images_per_s": last["images_per_s"], "output_dir": cfg.train.output_dir}
