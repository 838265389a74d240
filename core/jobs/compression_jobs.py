"""The model-compression jobs (schemas in mstrain.jobs.compression_config):

    mstrain --config configs/lenet_mnist_qat.yaml     # int8 quantization-aware training of LeNet-5
    mstrain --config configs/lenet_mnist_slb.yaml     # SLB 1/2/4-bit weights of LeNet-5
    mstrain --config configs/resnet8_mnist_scop.yaml  # SCOP channel pruning of ResNet-8

Each trains the float network first (the baseline: `train` and `optimizer` sections), compresses a
copy of it (`compression` section), and reports both side by side: test accuracy, model bytes
(float: float32 parameter bytes; quantized: the bytes of the file `convert` writes) and inference
images/s measured eagerly on the test images (`report` section). Results are also returned as a
dict (the CLI prints it as JSON).
"""
import copy
import dataclasses
import statistics
import time

import numpy as np

from .. import dataset as ds
from .. import nn
from ..log import get_logger, is_main_process
from ..registry import register_job
from ..tensor import Tensor
from .common import build_callbacks, build_optimizer, prepare_run
from .compression_config import LenetQatConfig, LenetSlbConfig, Resnet8ScopConfig
from .mlp_mnist import mnist_images

__all__ = ["mnist_images", "fit", "accuracy", "images_per_second",
           "side_by_side_images_per_second", "float_bytes", "train_float", "slb_search", "run_qat", "run_slb",
           "run_scop"]


def fit(cfg, network, inputs, labels, name, epochs, lr=None, callbacks=(), train_network=None):
    """Train `network` (or `train_network`, a Cell giving the logits of `inputs`) with the job's
    train / optimizer sections, `epochs` epochs at learning rate `lr` (None: optimizer.lr).
    Returns the last training loss."""
    from ..train import Model
    train_set = ds.NumpySlicesDataset({"image": inputs, "label": labels}, shuffle=cfg.data.shuffle)
    train_set = train_set.batch(cfg.train.batch_size, drop_remainder=cfg.data.drop_remainder)
    steps = cfg.train.sink_size if cfg.train.sink_size > 0 else train_set.get_dataset_size()
    trained = train_network if train_network is not None else network
    opt_cfg = cfg.optimizer if lr is None else dataclasses.replace(cfg.optimizer, lr=lr)
    optimizer = build_optimizer(opt_cfg, trained.trainable_params(), epochs * steps)
    model = Model(trained, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer,
                  amp_level=cfg.train.amp_level)
    history = build_callbacks(cfg.train, name, steps)
    if epochs:
        model.train(epochs, train_set, callbacks=history + list(callbacks),
                    dataset_sink_mode=cfg.train.dataset_sink_mode, sink_size=cfg.train.sink_size,
                    resume_from=cfg.train.resume)
    losses = history[0].history.get("loss") or [None]
    return losses[-1]


def _eager():
    from ..context import PYNATIVE_MODE, set_context
    set_context(mode=PYNATIVE_MODE)  # the integer layers compute in numpy: measure every network eagerly


def accuracy(network, x, y, batch):
    """Test accuracy of `network` (called eagerly in inference mode on batches of `batch`)."""
    network.set_train(False)
    correct = 0
    for start in range(0, len(x), batch):
        logits = network(Tensor(x[start:start + batch])).asnumpy()
        correct += int((logits.argmax(axis=1) == y[start:start + batch]).sum())
    return correct / len(x)


def images_per_second(network, x, batch, repeats):
    """Inference images/s over `x` in batches of `batch`: the median of `repeats` timed passes after one warm-up."""
    network.set_train(False)

    def one_pass():
        for start in range(0, len(x), batch):
            network(Tensor(x[start:start + batch]))

    one_pass()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        one_pass()
        times.append(time.perf_counter() - start)
    return len(x) / statistics.median(times)


def float_bytes(network):
    """Bytes of the network's Parameters stored as float32."""
    return int(sum(np.prod(p.shape) * 4 for p in network.get_parameters()))


def _measure(cfg, network, x_test, y_test):
    return {"acc": round(accuracy(network, x_test, y_test, cfg.report.speed_batch), 4),
            "images_per_s": round(images_per_second(network, x_test, cfg.report.speed_batch,
                                                    cfg.report.speed_repeats), 1)}


def _log(name, rows):
    if not is_main_process():
        return
    logger = get_logger(name)
    keys = [k for k in rows[0][1]]
    logger.info("%-14s " + " ".join(f"{k:>14}" for k in keys), "network")
    for label, row in rows:
        logger.info("%-14s " + " ".join(f"{row.get(k, ''):>14}" for k in keys), label)


def train_float(cfg, network, name):
    """Load the job's MNIST split and train `network` with its train / optimizer sections; returns
    ((x_train, y_train), (x_test, y_test))."""
    return _baseline(cfg, network, name)


def _baseline(cfg, network, name):
    data = mnist_images(cfg)
    prepare_run(cfg)
    fit(cfg, network, data[0][0], data[0][1], name, cfg.train.epochs)
    return data


@register_job("lenet_mnist_qat", schema=LenetQatConfig)
def run_qat(cfg):
    """LeNet-5 on MNIST: float, then int8 quantization-aware training; accuracy, bytes and images/s."""
    from ..compression import QatConfig, SimulatedQuantizationAwareTraining, model_bytes
    from .lenet_mnist import LeNet5
    name, c = "lenet_mnist_qat", cfg.compression
    float_net = LeNet5()
    (x_train, y_train), (x_test, y_test) = _baseline(cfg, float_net, name)
    algo = SimulatedQuantizationAwareTraining(QatConfig(
        include=c.include, exclude=c.exclude, weight_bits=c.weight_bits, act_bits=c.act_bits, ema_decay=c.ema_decay,
        bn_fold=c.bn_fold, freeze_bn_steps=c.freeze_bn_steps))
    qat_net = algo.apply(copy.deepcopy(float_net))
    fit(cfg, qat_net, x_train, y_train, name, c.epochs, c.lr, algo.callbacks())
    int8_net = algo.convert(qat_net, save_path=cfg.report.save_path)
    _eager()
    base = dict(_measure(cfg, float_net, x_test, y_test), bytes=float_bytes(float_net))
    fake = {"acc": round(accuracy(qat_net, x_test, y_test, cfg.report.speed_batch), 4)}
    quant = dict(_measure(cfg, int8_net, x_test, y_test), bytes=model_bytes(int8_net))
    _log(name, [("float", base), ("fake-quant", fake), (f"int{c.weight_bits}", quant)])
    return {"float": base, "fake_quant_acc": fake["acc"], "int8": quant,
            "acc_drop": round(base["acc"] - quant["acc"], 4), "bytes_ratio": round(quant["bytes"] / base["bytes"], 4),
            "speedup": round(quant["images_per_s"] / base["images_per_s"], 3)}


@register_job("lenet_mnist_slb", schema=LenetSlbConfig)
def run_slb(cfg):
    """LeNet-5 on MNIST: float, then SLB low-bit weight search; accuracy, bytes, compression and images/s."""
    from .lenet_mnist import LeNet5
    name, c = "lenet_mnist_slb", cfg.compression
    float_net = LeNet5()
    data = _baseline(cfg, float_net, name)
    quant, low_bit = slb_search(cfg, float_net, data, c.weight_bits, cfg.report.save_path)
    _eager()
    base = dict(_measure(cfg, float_net, data[1][0], data[1][1]), bytes=float_bytes(float_net))
    _log(name, [("float", base), (f"slb w{c.weight_bits}a{c.act_bits}", quant)])
    return {"float": base, "slb": quant, "weight_bits": c.weight_bits, "act_bits": c.act_bits,
            "acc_drop": round(base["acc"] - quant["acc"], 4),
            "compression": round(base["bytes"] / quant["bytes"], 2)}


def slb_search(cfg, float_net, data, weight_bits, save_path=None):
    """SLB search of `weight_bits`-bit weights from a copy of the trained `float_net` with the
    job's `compression` section; ({"acc", "images_per_s", "bytes"}, the low-bit network)."""
    from ..compression import SlbConfig, SlbQuantAwareTraining, model_bytes
    c = cfg.compression
    (x_train, y_train), (x_test, y_test) = data
    steps = -(-len(x_train) // cfg.train.batch_size) if cfg.train.sink_size <= 0 else cfg.train.sink_size
    algo = SlbQuantAwareTraining(SlbConfig(
        include=c.include, exclude=c.exclude, weight_bits=weight_bits, act_bits=c.act_bits, t_start=c.t_start,
        t_end=c.t_end, total_steps=max(1, c.epochs * steps), ema_decay=c.ema_decay))
    slb_net = algo.apply(copy.deepcopy(float_net))
    fit(cfg, slb_net, x_train, y_train, "lenet_mnist_slb", c.epochs, c.lr, algo.callbacks())
    low_bit = algo.convert(slb_net, save_path=save_path)
    from ..context import get_context, set_context
    mode = get_context("mode")
    _eager()
    row = dict(_measure(cfg, low_bit, x_test, y_test), bytes=model_bytes(low_bit))
    set_context(mode=mode)  # a later search trains in the job's mode again
    return row, low_bit


@register_job("resnet8_mnist_scop", schema=Resnet8ScopConfig)
def run_scop(cfg):
    """ResNet-8 on MNIST: float training, then two branches of equal length from those weights:
    SCOP (knockoff training, pruning, fine-tuning) and the unpruned network trained on for the same
    epochs with the same schedule (the fair baseline); accuracy, parameters, FLOPs, conv channels
    and images/s of both, side by side."""
    from ..compression import (KnockoffTrainNetwork, PrunerFtCompressAlgo, PrunerKfCompressAlgo, ScopConfig,
                               gaussian_knockoffs, pair_with_knockoffs)
    from .resnet_mnist import ResNet8
    name, c = "resnet8_mnist_scop", cfg.compression
    start = time.perf_counter()
    float_net = ResNet8()
    (x_train, y_train), (x_test, y_test) = _baseline(cfg, float_net, name)
    scop = ScopConfig(include=c.include, exclude=c.exclude, prune_rate=c.prune_rate, threshold=c.threshold,
                      input_shape=(1, 28, 28), freeze_network=c.freeze_network)
    kf_net = PrunerKfCompressAlgo(scop).apply(copy.deepcopy(float_net))
    knockoffs = gaussian_knockoffs(x_train, shrinkage=c.knockoff_shrinkage, seed=cfg.train.seed)
    fit(cfg, kf_net, pair_with_knockoffs(x_train, knockoffs), y_train, name, c.kf_epochs, c.kf_lr,
        train_network=KnockoffTrainNetwork(kf_net))
    pruner = PrunerFtCompressAlgo(scop)
    pruned = pruner.apply(kf_net)
    before_finetune = accuracy(copy.deepcopy(pruned), x_test, y_test, cfg.report.speed_batch)
    fit(cfg, pruned, x_train, y_train, name, c.finetune_epochs, c.finetune_lr)
    scop_seconds = time.perf_counter() - start
    # the baseline goes on for as many epochs, without knockoffs or pruning; its weights train in the
    # knockoff epochs too (at the fine-tuning rate when SCOP's are frozen there)
    unpruned = float_net
    fit(cfg, unpruned, x_train, y_train, name, c.kf_epochs, c.finetune_lr if c.freeze_network else c.kf_lr)
    fit(cfg, unpruned, x_train, y_train, name, c.finetune_epochs, c.finetune_lr)
    _eager()
    rows = _scop_rows(cfg, [("unpruned", unpruned), ("pruned", pruned)], x_test, y_test, pruner)
    _log(name, rows)
    (_, base), (_, small) = rows
    return {"unpruned": base, "pruned": small, "layers": {k: list(v) for k, v in pruner.pruned.items()},
            "epochs": {"float": cfg.train.epochs, "knockoff": c.kf_epochs, "finetune": c.finetune_epochs,
                       "unpruned_total": cfg.train.epochs + c.kf_epochs + c.finetune_epochs},
            "channels_pruned": round(1 - small["conv_channels"] / base["conv_channels"], 4),
            "acc_drop": round(base["acc"] - small["acc"], 4), "pruned_acc_before_finetune": round(before_finetune, 4),
            "params_ratio": round(small["params"] / base["params"], 4),
            "flops_ratio": round(small["flops"] / base["flops"], 4),
            "speedup": round(small["images_per_s"] / base["images_per_s"], 3),
            "seconds": round(time.perf_counter() - start, 1), "scop_seconds": round(scop_seconds, 1)}


def _scop_rows(cfg, named, x_test, y_test, pruner):
    """Accuracy, parameters, FLOPs (2 x multiply-accumulates), conv output channels and images/s of
    each network (BatchNorm folded, as deployed); images/s timed in alternation so both see the
    same machine load."""
    from ..compression import count_macs, count_params
    deployed = [pruner.convert(net) for _, net in named]
    speeds = side_by_side_images_per_second(deployed, x_test, cfg.report.speed_batch, cfg.report.speed_repeats)
    rows = []
    for (label, net), folded, speed in zip(named, deployed, speeds):
        macs = count_macs(net, (1, 28, 28))
        rows.append((label, {"acc": round(accuracy(folded, x_test, y_test, cfg.report.speed_batch), 4),
                             "images_per_s": round(speed, 1), "params": count_params(net), "macs": macs,
                             "flops": 2 * macs, "conv_channels": sum(
                                 m.out_channels for _, m in net.cells_and_names() if isinstance(m, nn.Conv2d))}))
    return rows


def side_by_side_images_per_second(networks, x, batch, repeats):
    """Inference images/s of each network over `x` in batches of `batch`: one warm-up pass each,
    then `repeats` rounds timing one pass of every network in turn; the median per network."""
    times = [[] for _ in networks]
    for net in networks:
        net.set_train(False)
    for round_index in range(repeats + 1):
        for net, spent in zip(networks, times):
            begin = time.perf_counter()
            for first in range(0, len(x), batch):
                net(Tensor(x[first:first + batch]))
            if round_index:  # round 0 warms up
                spent.append(time.perf_counter() - begin)
    return [len(x) / statistics.median(spent) for spent in times]
