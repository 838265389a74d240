"""Channel groups: which Conv2d output channels a structured pruner must remove together, found by
tracing the network once.

Removing output channel c of a Conv2d removes it from everything its channels reach. In a residual
network the outputs of several convolutions are added (a block's last conv, its shortcut conv or
the block input, the stem): those convolutions share one channel set, so they are one group and
lose the same channels. `channel_groups` runs the network once eagerly on zeros, with Conv2d,
BatchNorm2d and Dense as opaque leaves and every op between them recorded on the autograd tape,
and follows the channel axis through the recorded ops:

- each Conv2d output starts a channel set; a BatchNorm2d keeps its input's set;
- channel-preserving ops (activations, pooling, scalar arithmetic, a flatten of (N, C, 1, 1)) keep it;
- an elementwise op on two traced tensors of one shape merges their sets (the residual add);
- a Conv2d (group 1) or Dense taking a set's tensor as its input is a consumer of the set.

A set is prunable only when nothing else touches it: every producer is a Conv2d read only by its
own BatchNorm2d, and the set never reaches the network input, output, a Dense output, a grouped
convolution, a non-scalar constant or an op not listed here. Anything unrecognised makes the
sets it touches fixed, so an unusual network is pruned less, never wrongly.
"""
from dataclasses import dataclass, field
from typing import List, Tuple

import numpy as np

from .. import autograd
from ..context import PYNATIVE_MODE, get_context, set_context
from ..nn import BatchNorm2d, Conv2d, Dense
from ..tensor import Tensor

__all__ = ["ChannelGroup", "channel_groups"]

# ops whose output has the input's channel axis, channel for channel
_KEEPS_CHANNELS = {"relu", "relu6", "sigmoid", "tanh", "gelu", "silu", "elu", "leaky_relu", "softplus", "hswish",
                   "hsigmoid", "mish", "neg", "abs", "square", "sqrt", "exp", "cast", "identity", "dropout",
                   "avg_pool2d", "max_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "avg_pool", "max_pool"}
# elementwise ops of two operands: two traced operands are one channel set
_ELEMENTWISE = {"add", "sub", "mul", "div", "maximum", "minimum", "real_div"}
_RESHAPES = {"reshape", "reshape_to", "flatten"}
_FIXED = 0  # the channel set that may not change (network input and output, Dense features)


@dataclass
class ChannelGroup:
    """Output channels shared by `producers` ((conv path, BatchNorm2d path) pairs: their outputs
    are added or otherwise combined elementwise) and read by `consumers` (Conv2d / Dense paths
    whose input axis is these channels)."""
    producers: List[Tuple[str, str]]
    consumers: List[str] = field(default_factory=list)
    channels: int = 0

    @property
    def name(self):
        return self.producers[0][0]


class _Sets:
    """Union-find over channel-set ids; id 0 is the fixed set."""

    def __init__(self):
        self.parent = [0]

    def new(self):
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, i):
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a, b):
        a, b = self.find(a), self.find(b)
        if a != b:  # the smaller id wins, so the fixed set absorbs what joins it
            self.parent[max(a, b)] = min(a, b)


class _Trace:
    """One eager forward with Conv2d / BatchNorm2d / Dense as leaves (see the module doc)."""

    def __init__(self, network):
        self.calls = {}        # id(leaf node of a cell output) -> (path, cell, input tensor)
        self.keep_alive = []
        self.network = network

    def leaf_call(self, path, cell, original):
        def construct(x):
            with autograd.no_grad():
                out = original(x)
            autograd.make_leaf(out)
            self.calls[id(out._node)] = (path, cell, x)
            self.keep_alive.append((x, out))
            return out
        return construct

    def run(self, input_shape):
        import copy
        probe = copy.deepcopy(self.network).set_train(False)
        for path, cell in probe.cells_and_names():
            if isinstance(cell, (Conv2d, BatchNorm2d, Dense)):
                object.__setattr__(cell, "construct", self.leaf_call(path, cell, cell.construct))
        x = autograd.make_leaf(Tensor(np.zeros((2,) + tuple(input_shape), np.float32)))
        mode = get_context("mode")
        set_context(mode=PYNATIVE_MODE)
        try:
            with autograd.tape():
                out = probe(x)
        except Exception as exc:  # the probe input is the user's input_shape: name it
            raise ValueError(f"channel_groups: the network does not run on one input of shape {tuple(input_shape)} "
                             f"({type(exc).__name__}: {exc}); pass the input_shape it takes") from exc
        finally:
            set_context(mode=mode)
        self.input_node = x._node
        return out


def _inputs_of(node, calls):
    if node.prim is not None:
        return [t for t in node.inputs if isinstance(t, Tensor) and t._node is not None]
    call = calls.get(id(node))
    return [call[2]] if call is not None and call[2]._node is not None else []


def _topological(outputs, calls):
    order, seen = [], set()
    stack = [(t._node, False) for t in outputs if isinstance(t, Tensor) and t._node is not None]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((t._node, False) for t in _inputs_of(node, calls) if id(t._node) not in seen)
    return order


class _Analysis:
    def __init__(self, trace):
        self.trace, self.sets = trace, _Sets()
        self.set_of = {}       # (id(node), output index) -> channel-set id
        self.producer_of = {}  # set id at creation -> conv path
        self.bn_of = {}        # conv path -> BatchNorm2d path
        self.consumers = {}    # set id at creation -> [consumer paths]
        self.uses = {}         # (id(node), index) -> times read

    def of(self, tensor):
        return self.set_of.get((id(tensor._node), tensor._index), _FIXED)

    def fix(self, *ids):
        for i in ids:
            self.sets.union(i, _FIXED)

    def leaf(self, node):
        call = self.trace.calls.get(id(node))
        if call is None:  # the network input
            self.set_of[(id(node), 0)] = _FIXED
            return
        path, cell, x = call
        source = self.of(x) if x._node is not None else _FIXED
        if isinstance(cell, Conv2d):
            if cell.group != 1:
                self.fix(source)
            self.consumers.setdefault(source, []).append(path)
            created = self.sets.new()
            self.producer_of[created] = (path, cell)
            self.set_of[(id(node), 0)] = created
        elif isinstance(cell, BatchNorm2d):
            conv = self.producer_of.get(source)
            if conv is None or self.uses.get((id(x._node), x._index), 0) != 1 or conv[0] in self.bn_of:
                self.fix(source)  # a BatchNorm2d not directly on its own convolution's output
            else:
                self.bn_of[conv[0]] = path
            self.set_of[(id(node), 0)] = source
        else:  # Dense: its features are fixed; its input is a set only when 2-D (N, C)
            if len(x.shape) != 2:
                self.fix(source)
            self.consumers.setdefault(source, []).append(path)
            self.set_of[(id(node), 0)] = _FIXED

    def op(self, node):
        name = node.prim.name
        traced = [t for t in node.inputs if isinstance(t, Tensor) and t._node is not None]
        ids = [self.of(t) for t in traced]
        out = node.outputs[0]()
        constants = [t for t in node.inputs if isinstance(t, Tensor) and t._node is None and t.size > 1]
        if name == "matmul":
            constants = []
        result = ids[0]
        if len(node.outputs) != 1 or out is None or len(out.shape) < 2:
            self.fix(*ids)
            result = _FIXED
        elif name in _KEEPS_CHANNELS and len(traced) == 1 and not constants:
            pass
        elif name in _ELEMENTWISE and not constants and all(t.shape == out.shape for t in traced):
            for other in ids[1:]:
                self.sets.union(result, other)
        elif name in _RESHAPES and len(traced) == 1 and _keeps_axis1(traced[0].shape, out.shape):
            pass
        elif name == "matmul" and len(traced) == 1 and _spatial_matmul(traced[0], node.inputs, out):
            pass
        else:
            self.fix(*ids)
            result = _FIXED
        self.set_of[(id(node), 0)] = result

    def run(self, output):
        outputs = list(output) if isinstance(output, (tuple, list)) else [output]
        order = _topological(outputs, self.trace.calls)
        for node in order:
            for t in _inputs_of(node, self.trace.calls):
                key = (id(t._node), t._index)
                self.uses[key] = self.uses.get(key, 0) + 1
        for node in order:
            self.leaf(node) if node.prim is None else self.op(node)
        for t in outputs:
            if isinstance(t, Tensor) and t._node is not None:
                self.fix(self.of(t))
        return self.groups()

    def groups(self):
        by_root = {}
        for created, (path, cell) in self.producer_of.items():
            if path not in self.bn_of:
                self.fix(created)  # no BatchNorm2d of its own: nothing to hold its knockoff scale
        for created, (path, cell) in self.producer_of.items():
            root = self.sets.find(created)
            if root == _FIXED:
                continue
            group = by_root.setdefault(root, ChannelGroup([], [], cell.out_channels))
            group.producers.append((path, self.bn_of[path]))
        for created, paths in self.consumers.items():
            root = self.sets.find(created)
            if root in by_root:
                by_root[root].consumers.extend(paths)
        return [by_root[r] for r in sorted(by_root)]


def _keeps_axis1(before, after):
    """A reshape that keeps axes 0 and 1 and only drops or adds unit axes after them."""
    return tuple(before[:2]) == tuple(after[:2]) and all(d == 1 for d in before[2:]) and all(
        d == 1 for d in after[2:])


def _spatial_matmul(traced, inputs, out):
    """A matmul of a (N, C, ...) tensor with a 2-D matrix acts on its last two axes only (adaptive
    pooling, resampling): the channel axis passes through."""
    others = [t for t in inputs if t is not traced]
    return (len(traced.shape) >= 4 and len(others) == 1 and len(getattr(others[0], "shape", ())) == 2
            and tuple(out.shape[:2]) == tuple(traced.shape[:2]))


def channel_groups(network, input_shape):
    """[ChannelGroup] of `network`: the Conv2d output channel sets that can be pruned, each with
    the convolutions producing it and the layers consuming it (see the module doc), in network
    order. `input_shape`: one input without the batch axis, e.g. (1, 28, 28)."""
    trace = _Trace(network)
    output = trace.run(input_shape)
    groups = _Analysis(trace).run(output)
    for group in groups:
        group.consumers = sorted(set(group.consumers), key=group.consumers.index)
    return groups
