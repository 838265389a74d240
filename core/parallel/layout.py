"""`TensorLayout`: how a global tensor is cut over ranks (MindSpore's device matrix + tensor map).

The ranks of `ranks` are arranged row-major in a device matrix of shape `dev_matrix`. Tensor
dimension i is split over device axis `tensor_map[i]` (-1: not split), so the block a rank holds
follows from its coordinates in the matrix; device axes no tensor dimension uses hold replicas
(or partial sums, for the axes listed in `partial`). Unlike MindSpore's strategy files, the
tensor map counts device axes from the left.

    >>> lay = TensorLayout((2, 2), (1, -1), (8, 3), (0, 1, 2, 3))   # dim 0 split over axis 1
    >>> lay.local_shape, lay.block_slices(3)
    ((4, 3), (slice(4, 8, None), slice(0, 3, None)))
"""
from dataclasses import dataclass

import numpy as np

from ..errors import ParallelConfigError, ShapeError


@dataclass(frozen=True)
class TensorLayout:
    dev_matrix: tuple
    tensor_map: tuple
    global_shape: tuple
    ranks: tuple
    partial: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "dev_matrix", tuple(int(d) for d in self.dev_matrix))
        object.__setattr__(self, "tensor_map", tuple(int(m) for m in self.tensor_map))
        object.__setattr__(self, "global_shape", tuple(int(s) for s in self.global_shape))
        object.__setattr__(self, "ranks", tuple(int(r) for r in self.ranks))
        object.__setattr__(self, "partial", tuple(sorted(int(a) for a in self.partial)))
        if int(np.prod(self.dev_matrix, dtype=np.int64)) != len(self.ranks):
            raise ShapeError(f"device matrix {self.dev_matrix} does not hold the {len(self.ranks)} ranks {self.ranks}")
        if len(self.tensor_map) != len(self.global_shape):
            raise ShapeError(f"tensor map {self.tensor_map} does not fit a tensor of shape {self.global_shape}")
        for dim, axis in enumerate(self.tensor_map):
            if axis >= 0 and self.global_shape[dim] % self.dev_matrix[axis]:
                raise ShapeError(f"dimension {dim} of shape {self.global_shape} does not divide into the "
                                 f"{self.dev_matrix[axis]} parts of device axis {axis}")

    # -- geometry ---------------------------------------------------------------------------------
    @property
    def splits(self):
        """Number of parts of each tensor dimension."""
        return tuple(self.dev_matrix[a] if a >= 0 else 1 for a in self.tensor_map)

    @property
    def local_shape(self):
        return tuple(s // k for s, k in zip(self.global_shape, self.splits))

    def coords(self, world_rank):
        """The device-matrix coordinates of a world rank."""
        index = self.ranks.index(world_rank)
        return tuple(int(c) for c in np.unravel_index(index, self.dev_matrix))

    def block_index(self, world_rank):
        """Which part of each tensor dimension the rank holds."""
        c = self.coords(world_rank)
        return tuple(c[a] if a >= 0 else 0 for a in self.tensor_map)

    def block_slices(self, world_rank):
        """The rank's block as slices of the global tensor."""
        local = self.local_shape
        return tuple(slice(b * n, (b + 1) * n) for b, n in zip(self.block_index(world_rank), local))

    def shard(self, full, world_rank):
        """The rank's block of the global array `full` (a copy)."""
        full = np.asarray(full)
        if tuple(full.shape) != self.global_shape:
            raise ShapeError(f"array of shape {full.shape} does not match the layout's global shape {self.global_shape}")
        return full[self.block_slices(world_rank)].copy(order="C")  # (ascontiguousarray makes 0-d 1-d)

    def owners(self):
        """{block index: [world ranks holding it]}; every rank of a block holds the same values."""
        table = {}
        for r in self.ranks:
            table.setdefault(self.block_index(r), []).append(r)
        return table

    def is_replicated(self):
        return all(a < 0 for a in self.tensor_map) and not self.partial

    # -- files ------------------------------------------------------------------------------------
    def to_json(self):
        return {"dev_matrix": list(self.dev_matrix), "tensor_map": list(self.tensor_map),
                "global_shape": list(self.global_shape), "ranks": list(self.ranks), "partial": list(self.partial)}

    @classmethod
    def from_json(cls, data):
        return cls(tuple(data["dev_matrix"]), tuple(data["tensor_map"]), tuple(data["global_shape"]),
                   tuple(data["ranks"]), tuple(data.get("partial", ())))

    @classmethod
    def replicated(cls, shape, ranks):
        return cls((len(ranks),), (-1,) * len(shape), tuple(shape), tuple(ranks))


def strategy_layout(splits, global_shape, ranks, who):
    """The layout cutting axis d of `global_shape` splits[d] ways over `ranks` (a repeat axis first
    when the splits use fewer devices); one clear error naming `who` when it cannot."""
    n = len(ranks)
    if len(splits) != len(global_shape):
        raise ParallelConfigError(f"{who}: strategy {splits} has {len(splits)} entries for a tensor of rank "
                                  f"{len(global_shape)} (shape {tuple(global_shape)})")
    for d, (size, s) in enumerate(zip(global_shape, splits)):
        if size % s:
            raise ParallelConfigError(f"{who}: strategy {splits} splits axis {d} of size {size} {s} ways, "
                                      f"which does not divide it (shape {tuple(global_shape)})")
    used = int(np.prod(splits, dtype=np.int64))
    if used > n or n % used:
        raise ParallelConfigError(f"{who}: strategy {splits} uses {used} devices, more than or not dividing the "
                                  f"{n} ranks the network runs on")
    lead = (n // used,) if n // used > 1 else ()
    dev, axes, k = list(lead), [], len(lead)
    for s in splits:
        axes.append(k if s > 1 else -1)
        if s > 1:
            dev.append(s)
            k += 1
    return TensorLayout(tuple(dev) or (1,), tuple(axes), tuple(global_shape), tuple(ranks))


def assemble(layout, blocks):
    """The global array from {world rank: local block} (one holder per block is enough)."""
    first = next(iter(blocks.values()))
    full = np.empty(layout.global_shape, np.asarray(first).dtype)
    filled = set()
    for rank, block in blocks.items():
        index = layout.block_index(rank)
        if index in filled:
            continue
        full[layout.block_slices(rank)] = block
        filled.add(index)
    missing = set(layout.owners()) - filled
    if missing:
        raise ShapeError(f"cannot assemble a tensor of shape {layout.global_shape}: blocks {sorted(missing)} "
                         "are missing")
    return full
