"""SCOP structured pruning (Tang et al., "SCOP: Scientific Control for Reliable Neural Network
Pruning", NeurIPS 2020): `PrunerKfCompressAlgo` + `PrunerFtCompressAlgo`.

Knockoff inputs X~ (`gaussian_knockoffs`: same distribution as the images, independent of the label
given them) are the scientific control. `PrunerKfCompressAlgo.apply` finds the network's channel
groups (`mstrain.compression.channels`: the output channels of the convolutions whose outputs are
added together, e.g. a residual stage's stem or block outputs and shortcut projections, form one
group; the inner convolution of a block is a group of its own) and turns every producer
Conv2d + BatchNorm2d into a `KnockoffConv2dBn`, the producers of one group sharing one learned
scale. The network runs on the batch [X; X~] and every such layer mixes, per output channel c,
the real feature with its knockoff counterpart,

    real_out_c = beta_c * f_c(X) + (1 - beta_c) * f_c(X~),   beta_c = sigmoid(s_c), s_c = 0 at first,

while the knockoff half flows on as the knockoff features of the next layer. As in MindSpore Golden
Stick's SCOP, by default only the scales learn in this phase (`freeze_network`: the weights and the
BatchNorm statistics stay as trained) and the knockoff layer computes plain bn(conv(x)) in
inference, so the scales measure the trained network without changing it. A channel whose real
feature the network does not prefer over its knockoff (importance beta_c - (1 - beta_c) low) is
removed by `PrunerFtCompressAlgo.apply` from its whole group: every producer Conv2d and
BatchNorm2d gets physically fewer output channels, every consumer Conv2d or Dense fewer inputs
(what the network computes with those channels' BatchNorm outputs set to zero); the network is
unfrozen and fine-tuned as an ordinary one. `convert` folds the BatchNorms for deployment.
"""
import copy
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .. import ops
from ..nn import BatchNorm2d, Cell, Conv2d, Dense, Identity
from ..tensor import Parameter, Tensor
from .base import AlgoConfig, CompAlgo
from .channels import channel_groups
from .rewrite import _matches, find_cells, fold_conv_bn, get_cell, replace_cell

__all__ = ["ScopConfig", "PrunerKfCompressAlgo", "PrunerFtCompressAlgo", "KnockoffConv2dBn", "KnockoffTrainNetwork",
           "gaussian_knockoffs", "pair_with_knockoffs", "count_params", "count_macs"]


@dataclass
class ScopConfig(AlgoConfig):
    """prune_rate: fraction of each channel group's channels removed, least important first
    (0: remove those with importance below `threshold`). input_shape: one network input without
    the batch axis, for the trace that finds the channel groups (None: the first Conv2d's
    in_channels at 32 x 32). freeze_network: the knockoff phase trains only the scales (weights
    frozen, BatchNorms on their moving statistics); PrunerFtCompressAlgo unfreezes them."""
    prune_rate: float = 0.5
    threshold: float = 0.0
    input_shape: Optional[Tuple[int, ...]] = None
    freeze_network: bool = True


def gaussian_knockoffs(x, shrinkage=0.3, seed=0):
    """Second-order (Gaussian, equicorrelated) model-X knockoffs of the rows of `x` (N, D): each row
    X~ = mu + (X - mu)(I - S^-1 D) + Z L^T with L L^T = 2D - D S^-1 D, S the covariance shrunk by
    `shrinkage` toward its diagonal, D = s * diag(S), s = min(1, 2 lambda_min(correlation)).
    Constant columns stay constant."""
    x = np.asarray(x, np.float64)
    flat = x.reshape(len(x), -1)
    mu = flat.mean(axis=0)
    centered = flat - mu
    cov = centered.T @ centered / max(len(flat) - 1, 1)
    std = np.sqrt(np.diag(cov))
    live = std > 1e-6 * max(std.max(), 1e-12)
    corr = cov[np.ix_(live, live)] / np.outer(std[live], std[live])
    corr = (1.0 - shrinkage) * corr + shrinkage * np.eye(len(corr))
    eigenvalues, vectors = np.linalg.eigh(corr)  # one decomposition gives C^-1 and the noise's square root
    s = min(1.0, 2.0 * eigenvalues[0]) * 0.999
    inv_s = (vectors * (s / eigenvalues)) @ vectors.T  # C^-1 D in correlation units (D = s I)
    root = vectors * np.sqrt(np.maximum(2.0 * s - s * s / eigenvalues, 0.0))  # root root^T = 2D - D C^-1 D
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((len(flat), len(corr))) @ root.T
    z = (centered[:, live] / std[live]) @ (np.eye(len(corr)) - inv_s) + noise
    out = np.tile(mu, (len(flat), 1))
    out[:, live] += z * std[live]
    return out.reshape(x.shape).astype(np.float32)


def _probe_shape(network, input_shape):
    if input_shape is not None:
        return tuple(input_shape)
    convs = [c for _, c in network.cells_and_names() if isinstance(c, Conv2d)]
    if not convs:
        return None
    return (convs[0].in_channels, 32, 32)


class KnockoffConv2dBn(Cell):
    """Conv2d + BatchNorm2d whose real output channels compete with their knockoffs (see module doc).
    In training the input batch is [real; knockoff] halves; in inference the output is bn(conv(x)).
    The producers of one channel group share one `kfscale` Parameter (and `group`)."""

    def __init__(self, conv, bn, bn_path, group, kfscale=None):
        super().__init__()
        self.conv, self.bn = conv, bn
        self.bn_path, self.group = bn_path, group
        if kfscale is None:
            kfscale = Parameter(Tensor(np.zeros(conv.out_channels, np.float32)), name="kfscale")
        self.kfscale = kfscale

    def beta(self):
        # a sigmoid rather than Golden Stick's clip to [0, 1]: clipped scales saturate at 1 and tie
        return ops.reshape(ops.sigmoid(self.kfscale), (1, -1, 1, 1))

    def construct(self, x):
        y = self.bn(self.conv(x))
        if not self.training:
            return y
        beta = self.beta()
        half = y.shape[0] // 2
        real, knockoff = y[:half], y[half:]
        return ops.concat((beta * real + (1.0 - beta) * knockoff, knockoff), 0)

    def importance(self):
        """beta - (1 - beta) per output channel (numpy)."""
        scale = np.clip(self.kfscale.asnumpy().astype(np.float64), -500.0, 500.0)
        return 2.0 / (1.0 + np.exp(-scale)) - 1.0


def pair_with_knockoffs(x, knockoffs):
    """(N, 2, ...) numpy array of each input and its knockoff: the input column of the knockoff phase."""
    x, knockoffs = np.asarray(x), np.asarray(knockoffs)
    if x.shape != knockoffs.shape:
        raise ValueError(f"pair_with_knockoffs: inputs {x.shape} and knockoffs {knockoffs.shape} differ in shape")
    return np.stack([x, knockoffs], axis=1)


class KnockoffTrainNetwork(Cell):
    """The training network of the knockoff phase: takes `pair_with_knockoffs` batches (N, 2, ...),
    runs `network` on [x; x_knockoff] and returns the logits of the real half (for the loss)."""

    def __init__(self, network):
        super().__init__(auto_prefix=False)
        self.network = network

    def construct(self, pairs):
        out = self.network(ops.concat((pairs[:, 0], pairs[:, 1]), 0))
        return out[: pairs.shape[0]]


class PrunerKfCompressAlgo(CompAlgo):
    """SCOP, phase 1: knockoff layers in place of the Conv2d + BatchNorm2d producers of every
    prunable channel group (`channel_groups`); the producers of one group share one scale."""

    config_class = ScopConfig

    def _check_config(self, config):
        if not 0.0 <= config.prune_rate < 1.0:
            raise ValueError(f"ScopConfig.prune_rate must be in [0, 1), got {config.prune_rate!r}")
        if not -1.0 <= config.threshold <= 1.0:
            raise ValueError(f"ScopConfig.threshold must be in [-1, 1], got {config.threshold!r}")
        if config.input_shape is not None and (not config.input_shape or min(config.input_shape) < 1):
            raise ValueError(f"ScopConfig.input_shape must be positive sizes, got {config.input_shape!r}")

    def _selected(self, group):
        paths = [conv for conv, _ in group.producers]
        included = self.config.include is None or all(_matches(p, self.config.include) for p in paths)
        return included and not any(_matches(p, self.config.exclude or []) for p in paths)

    def apply(self, network):
        """Rewrite `network` in place; `self.groups` then lists the channel groups it will prune."""
        self._check_network(network, "PrunerKfCompressAlgo.apply")
        shape = _probe_shape(network, self.config.input_shape)
        groups = channel_groups(network, shape) if shape is not None else []
        self.groups = [g for g in groups if self._selected(g)]
        if not self.groups:
            raise ValueError(f"PrunerKfCompressAlgo: {type(network).__name__} has no prunable channel group (a "
                             "Conv2d read only by its BatchNorm2d, whose channels reach only Conv2d / Dense "
                             "inputs and elementwise ops; see mstrain.compression.channels)")
        for group in self.groups:
            scale = Parameter(Tensor(np.zeros(group.channels, np.float32)), name="kfscale")
            for conv_path, bn_path in group.producers:
                bn = replace_cell(network, bn_path, Identity())
                layer = KnockoffConv2dBn(get_cell(network, conv_path), bn, bn_path, group, scale)
                replace_cell(network, conv_path, layer)
            scale.name = group.name + ".kfscale"  # shared: named after the group's first producer
        if self.config.freeze_network:
            _freeze_all_but_scales(network)
        return network

    def convert(self, network):
        """The pruned network (PrunerFtCompressAlgo(config).apply)."""
        return PrunerFtCompressAlgo(self.config).apply(network)


class PrunerFtCompressAlgo(CompAlgo):
    """SCOP, phase 2: remove the channels the knockoff criterion rejects from every producer and
    consumer of each channel group; the result is fine-tuned."""

    config_class = ScopConfig
    _check_config = PrunerKfCompressAlgo._check_config

    def kept_channels(self, layer):
        importance = layer.importance()
        if self.config.prune_rate > 0:
            keep = max(1, len(importance) - int(self.config.prune_rate * len(importance)))
            kept = np.argsort(-importance, kind="stable")[:keep]
        else:
            kept = np.flatnonzero(importance >= self.config.threshold)
            if not len(kept):
                kept = np.array([int(np.argmax(importance))])
        return np.sort(kept)

    def apply(self, network):
        """Prune every channel group of `network`'s KnockoffConv2dBn layers in place; returns the
        network. `self.pruned` then maps each producer conv path to (channels before, channels kept)."""
        self._check_network(network, "PrunerFtCompressAlgo.apply")
        self.pruned = {}
        layers = [(p, c) for p, c in network.cells_and_names() if isinstance(c, KnockoffConv2dBn)]
        if not layers:
            raise ValueError("PrunerFtCompressAlgo.apply: the network has no KnockoffConv2dBn layers "
                             "(apply PrunerKfCompressAlgo and train it first)")
        _unfreeze(network)
        plans = {}
        for path, layer in layers:
            plans.setdefault(id(layer.group), (layer.group, self.kept_channels(layer), []))[2].append((path, layer))
        for group, kept, _ in plans.values():  # consumers first: a consumer may itself be a knockoff layer
            for consumer_path in group.consumers:
                _slice_consumer(network, consumer_path, kept)
        for group, kept, producers in plans.values():
            for path, layer in producers:
                replace_cell(network, path, _sliced_conv(layer.conv, out_kept=kept))
                replace_cell(network, layer.bn_path, _sliced_bn(layer.bn, kept))
                self.pruned[path] = (layer.conv.out_channels, len(kept))
        return network

    def convert(self, network):
        """A copy of the pruned network for deployment: inference mode, BatchNorms folded."""
        self._check_network(network, "PrunerFtCompressAlgo.convert")
        deployed = copy.deepcopy(network)
        fold_conv_bn(deployed)
        return deployed.set_train(False)


def _freeze_all_but_scales(network):
    """Only the knockoff scales train; every BatchNorm2d normalises with its moving statistics.
    What was changed is kept on the network for `_unfreeze`."""
    scales = {id(layer.kfscale) for _, layer in find_cells(network, KnockoffConv2dBn)}
    params = [p for p in network.get_parameters() if p.requires_grad and id(p) not in scales]
    norms = [(bn, bn.use_batch_statistics) for _, bn in find_cells(network, BatchNorm2d)]
    for param in params:
        param.requires_grad = False
    for bn, _ in norms:
        bn.use_batch_statistics = False
    object.__setattr__(network, "_scop_frozen", (params, norms))


def _unfreeze(network):
    params, norms = network.__dict__.pop("_scop_frozen", ((), ()))
    for param in params:
        param.requires_grad = True
    for bn, use_batch_statistics in norms:
        bn.use_batch_statistics = use_batch_statistics


def _slice_consumer(network, path, kept):
    consumer = get_cell(network, path)
    if isinstance(consumer, KnockoffConv2dBn):
        consumer.conv = _sliced_conv(consumer.conv, in_kept=kept)
    elif isinstance(consumer, Dense):
        replace_cell(network, path, _sliced_dense(consumer, kept))
    else:
        replace_cell(network, path, _sliced_conv(consumer, in_kept=kept))


def _sliced_dense(dense, in_kept):
    new = copy.deepcopy(dense)
    new.in_channels = len(in_kept)
    new.weight = Parameter(Tensor(np.ascontiguousarray(dense.weight.asnumpy()[:, in_kept])), name="weight")
    return new


def _sliced_conv(conv, out_kept=None, in_kept=None):
    weight = conv.weight.asnumpy()
    bias = conv.bias.asnumpy() if conv.bias is not None else None
    if out_kept is not None:
        weight = weight[out_kept]
        bias = bias[out_kept] if bias is not None else None
    if in_kept is not None:
        weight = weight[:, in_kept]
    new = Conv2d(weight.shape[1], weight.shape[0], conv.kernel_size, conv.stride, conv.pad_mode, conv.padding,
                 conv.dilation, 1, has_bias=bias is not None)
    new.weight = Parameter(Tensor(np.ascontiguousarray(weight)), name="weight")
    if bias is not None:
        new.bias = Parameter(Tensor(np.ascontiguousarray(bias)), name="bias")
    return new


def _sliced_bn(bn, kept):
    new = BatchNorm2d(len(kept), eps=bn.eps, momentum=bn.momentum, use_batch_statistics=bn.use_batch_statistics)
    for name in ("gamma", "beta", "moving_mean", "moving_variance"):
        getattr(new, name).set_data(Tensor(getattr(bn, name).asnumpy()[kept].astype(np.float32)))
    return new


def count_params(network):
    """Number of scalars in the network's Parameters."""
    return int(sum(np.prod(p.shape) for p in network.get_parameters()))


class _MacCounter(Cell):
    def __init__(self, layer, tally):
        super().__init__()
        self.layer, self.tally = layer, tally

    def construct(self, x):
        out = self.layer(x)
        if isinstance(self.layer, Conv2d):
            c = self.layer
            per_output = c.in_channels // c.group * c.kernel_size[0] * c.kernel_size[1]
        else:
            per_output = self.layer.in_channels
        self.tally.append(int(np.prod(out.shape[1:])) * per_output)
        return out


def count_macs(network, input_shape):
    """Multiply-accumulates of the Conv2d and Dense layers for one input of `input_shape` (without
    the batch axis), measured by running the network once in inference mode."""
    probe = copy.deepcopy(network).set_train(False)
    tally = []
    for path, cell in find_cells(probe, (Conv2d, Dense)):
        replace_cell(probe, path, _MacCounter(cell, tally))
    probe(Tensor(np.zeros((1,) + tuple(input_shape), np.float32)))
    return int(sum(tally))
