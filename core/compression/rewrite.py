"""Network rewriting: find Cells by type or name, replace them, insert Cells before or after them,
and fold Conv2d + BatchNorm2d. Every compression algorithm is written on these, and a user writing
a new algorithm can use them the same way.

Cells are addressed by their dotted path from the root (`cells_and_names()` names: "layer1.conv1").
A shared Cell (one object used at several places, e.g. LeNet's single ReLU) has one path, its first.

    from mstrain.compression import find_cells, replace_cell, insert_after, fold_conv_bn
    for path, conv in find_cells(net, types=nn.Conv2d, exclude=["conv1"]):
        replace_cell(net, path, MyConv(conv))
    insert_after(net, "fc1", nn.ReLU())
    fold_conv_bn(net)             # every Conv2d directly followed by its BatchNorm2d, for inference

Parents are changed through their public methods: a SequentialCell / CellList is re-indexed
(`parent[i] = cell`, `parent.insert(i, cell)`), a CellDict is set by key, any other Cell with
`insert_child_to_cell`. The new Cell's Parameters are named after its full path, as if the network
had been built with it.
"""
import fnmatch
from collections import OrderedDict

import numpy as np

from ..nn import BatchNorm2d, Cell, CellDict, CellList, Conv2d, Identity, SequentialCell
from ..tensor import Parameter, Tensor

__all__ = ["find_cells", "get_cell", "replace_cell", "insert_before", "insert_after", "conv_bn_pairs",
           "fold_conv_bn", "folded_conv", "InsertedCells"]


def _matches(path, patterns):
    return any(fnmatch.fnmatchcase(path, p) or path == p or path.startswith(p + ".") for p in patterns)


def find_cells(net, types=None, include=None, exclude=None):
    """[(path, cell)] of the descendants of `net` (pre-order) that are instances of `types` (a class
    or tuple; None: any) and whose path matches a pattern of `include` (None: every path) and none
    of `exclude`. Patterns are shell-style (`"layer*.conv?"`); a plain path also matches everything
    below it (`"layer1"` matches "layer1.conv1")."""
    include = [include] if isinstance(include, str) else include
    exclude = [exclude] if isinstance(exclude, str) else (exclude or [])
    found = []
    for path, cell in net.cells_and_names():
        if not path or (types is not None and not isinstance(cell, types)):
            continue
        if include is not None and not _matches(path, include):
            continue
        if not _matches(path, exclude):
            found.append((path, cell))
    return found


def get_cell(net, path):
    """The Cell at dotted `path` below `net`; KeyError naming the missing part."""
    cell = net
    for part in path.split("."):
        children = cell.name_cells()
        if part not in children:
            known = ", ".join(children) or "none"
            raise KeyError(f"no cell {part!r} in {type(cell).__name__} (path {path!r}); its children: {known}")
        cell = children[part]
    return cell


def _parent_and_name(net, path):
    if not path:
        raise ValueError("the root network itself cannot be replaced: rewrite its children")
    parent_path, _, name = path.rpartition(".")
    parent = get_cell(net, parent_path) if parent_path else net
    if name not in parent.name_cells():
        raise KeyError(f"no cell {name!r} in {type(parent).__name__} (path {path!r})")
    return parent, parent_path, name


def _set_child(parent, name, cell):
    if isinstance(parent, (SequentialCell, CellList)):
        parent[int(name)] = cell
    elif isinstance(parent, CellDict):
        parent[name] = cell
    else:
        parent.insert_child_to_cell(name, cell)


def _rename(net, path):
    cell = get_cell(net, path)
    cell.update_parameters_name(path + ".")


def replace_cell(net, path, new_cell):
    """Put `new_cell` at `path` in place of the Cell there; returns the old Cell."""
    if not isinstance(new_cell, Cell):
        raise TypeError(f"replace_cell: the replacement for {path!r} is a {type(new_cell).__name__}, not a Cell")
    parent, parent_path, name = _parent_and_name(net, path)
    old = parent.name_cells()[name]
    _set_child(parent, name, new_cell)
    _rename(net, parent_path if isinstance(parent, (SequentialCell, CellList)) and parent_path else path)
    return old


class InsertedCells(SequentialCell):
    """What insert_before / insert_after put at a path of a non-sequential parent: the inserted
    Cells and the original (`cell`), applied in order. Children: before_<i>, cell, after_<i>."""

    def __init__(self, cell, before=(), after=()):
        named = OrderedDict((f"before_{i}", c) for i, c in enumerate(before))
        named["cell"] = cell
        named.update((f"after_{i}", c) for i, c in enumerate(after))
        super().__init__(named)


def _insert(net, path, new_cell, after):
    if not isinstance(new_cell, Cell):
        raise TypeError(f"insert: the inserted object at {path!r} is a {type(new_cell).__name__}, not a Cell")
    parent, parent_path, name = _parent_and_name(net, path)
    if isinstance(parent, SequentialCell) and not isinstance(parent, InsertedCells):
        parent.insert(int(name) + int(after), new_cell)
        if parent_path:
            _rename(net, parent_path)
        return
    old = parent.name_cells()[name]
    wrapped = InsertedCells(old, after=[new_cell]) if after else InsertedCells(old, before=[new_cell])
    _set_child(parent, name, wrapped)
    _rename(net, path)


def insert_before(net, path, new_cell):
    """Run `new_cell` on the input of the Cell at `path` (inside a SequentialCell: a new element)."""
    _insert(net, path, new_cell, after=False)


def insert_after(net, path, new_cell):
    """Run `new_cell` on the output of the Cell at `path`."""
    _insert(net, path, new_cell, after=True)


def conv_bn_pairs(net, include=None, exclude=None):
    """[(conv path, bn path)]: each Conv2d registered directly before a BatchNorm2d of as many
    features in the same parent (the usual `conv -> bn` layout of a network's __init__)."""
    pairs = []
    for parent_path, parent in net.cells_and_names():
        children = list(parent.name_cells().items())
        for (name, cell), (next_name, next_cell) in zip(children, children[1:]):
            if (isinstance(cell, Conv2d) and isinstance(next_cell, BatchNorm2d)
                    and next_cell.num_features == cell.out_channels):
                prefix = parent_path + "." if parent_path else ""
                pair = (prefix + name, prefix + next_name)
                if (include is None or _matches(pair[0], include)) and not _matches(pair[0], exclude or []):
                    pairs.append(pair)
    return pairs


def folded_conv(conv, bn):
    """A new Conv2d (with bias) computing bn(conv(x)) with bn's moving statistics (inference):
    W' = W * g / sqrt(var + eps), b' = beta + (b - mean) * g / sqrt(var + eps)."""
    gamma, beta = bn.gamma.asnumpy(), bn.beta.asnumpy()
    mean, var = bn.moving_mean.asnumpy(), bn.moving_variance.asnumpy()
    scale = gamma / np.sqrt(var + bn.eps)
    weight = conv.weight.asnumpy() * scale.reshape(-1, 1, 1, 1)
    bias = conv.bias.asnumpy() if conv.bias is not None else np.zeros(conv.out_channels, weight.dtype)
    new = Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.pad_mode,
                 conv.padding, conv.dilation, conv.group, has_bias=True)
    new.weight = Parameter(Tensor(weight.astype(np.float32)), name="weight")
    new.bias = Parameter(Tensor((beta + (bias - mean) * scale).astype(np.float32)), name="bias")
    return new


def fold_conv_bn(net, pairs=None):
    """Fold each (conv path, bn path) of `pairs` (default: `conv_bn_pairs(net)`) for inference: the
    conv becomes `folded_conv(conv, bn)` and the BatchNorm2d an Identity. Returns the pairs folded."""
    pairs = conv_bn_pairs(net) if pairs is None else list(pairs)
    for conv_path, bn_path in pairs:
        conv, bn = get_cell(net, conv_path), get_cell(net, bn_path)
        if not isinstance(conv, Conv2d) or not isinstance(bn, BatchNorm2d):
            raise TypeError(f"fold_conv_bn: ({conv_path!r}, {bn_path!r}) is a {type(conv).__name__} and a "
                            f"{type(bn).__name__}, not a Conv2d and a BatchNorm2d")
        if bn.num_features != conv.out_channels:
            raise ValueError(f"fold_conv_bn: {bn_path!r} has {bn.num_features} features, {conv_path!r} "
                             f"{conv.out_channels} output channels")
        replace_cell(net, conv_path, folded_conv(conv, bn))
        replace_cell(net, bn_path, Identity())
    return pairs
