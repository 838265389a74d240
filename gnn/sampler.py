"""Neighbour sampling for mini-batch training on graphs too large for full-batch (GraphSAGE-style).

For a batch of seed nodes and fan-outs (k_1, ..., k_L) (k_1 for the first layer), the sampler walks
L hops outwards from the seeds: at each hop every frontier node keeps at most k of its in-neighbours,
drawn uniformly without replacement. Each hop gives one bipartite *block*: a `SparsePattern` of shape
(targets, sources) whose first `targets` source ids are the targets themselves, so a layer can read
its target features as `h[:targets]`. Blocks come back in layer order (block 0 feeds layer 1).

Everything is vectorised over the batch (no Python loop over nodes); relabelling to local ids uses
one reusable (N,) array, so a batch costs O(sampled edges), not O(N), even on a 1M-node graph.
"""
import numpy as np

from mstrain import random as ms_random
from mstrain.errors import ShapeError

from .graph import Graph
from .sparse import SparsePattern

__all__ = ["NeighborSampler", "SampledBatch"]


class SampledBatch:
    """What one sampled mini-batch holds.

    n_id: (S,) global ids of the input nodes (seeds first); blocks: [SparsePattern] per layer, block l
    of shape (targets_l, sources_l) with sources_l = targets_{l-1}; batch_size: number of seeds (the
    rows of the model's output, in the order of `n_id[:batch_size]`).
    """

    __slots__ = ("n_id", "blocks", "batch_size")

    def __init__(self, n_id, blocks, batch_size):
        self.n_id, self.blocks, self.batch_size = n_id, blocks, batch_size

    @property
    def seeds(self):
        return self.n_id[:self.batch_size]

    def __repr__(self):
        shapes = ", ".join(f"{b.shape[1]}->{b.shape[0]} ({b.nnz} edges)" for b in self.blocks)
        return f"SampledBatch(seeds={self.batch_size}, blocks=[{shapes}])"


class NeighborSampler:
    """Mini-batches of seed nodes with their sampled L-hop neighbourhoods.

    >>> g = Graph(np.array([[1, 2, 3, 0], [0, 0, 0, 1]]), num_nodes=4)
    >>> batch = NeighborSampler(g, fanouts=[2], batch_size=1).sample(np.array([0]))
    >>> batch.blocks[0].shape, batch.blocks[0].nnz
    ((1, 3), 2)

    Args:
        graph: a `Graph` or its in-edge `SparsePattern` (rows = targets, columns = sources).
        fanouts: neighbours kept per node at each layer, first layer first; -1 keeps all.
        batch_size: seeds per batch; `seeds`: the nodes to iterate over (default: all).
        shuffle: draw a new seed order for every pass; `generator`: a numpy Generator (default: forked
        from the suite's seeded generator).
    """

    def __init__(self, graph, fanouts, batch_size=512, seeds=None, shuffle=True, generator=None):
        self.pattern = graph.in_edges if isinstance(graph, Graph) else graph
        if not isinstance(self.pattern, SparsePattern) or self.pattern.shape[0] != self.pattern.shape[1]:
            raise ShapeError("NeighborSampler needs a Graph or a square in-edge SparsePattern")
        self.fanouts = [int(k) for k in fanouts]
        if not self.fanouts or any(k == 0 or k < -1 for k in self.fanouts):
            raise ValueError(f"fanouts must be positive ints (or -1 for all), got {list(fanouts)}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        num_nodes = self.pattern.shape[0]
        self.seeds = np.arange(num_nodes) if seeds is None else np.asarray(seeds, dtype=np.int64)
        if self.seeds.dtype == bool:
            self.seeds = np.flatnonzero(self.seeds)
        self.batch_size, self.shuffle = int(batch_size), shuffle
        self.generator = generator if generator is not None else ms_random.fork()
        self._local = np.full(num_nodes, -1, dtype=np.int64)  # global -> local id, reset after each batch

    def __len__(self):
        return -(-self.seeds.shape[0] // self.batch_size)

    def __iter__(self):
        order = self.generator.permutation(self.seeds) if self.shuffle else self.seeds
        for start in range(0, order.shape[0], self.batch_size):
            yield self.sample(order[start:start + self.batch_size])

    def sample(self, seeds):
        """The `SampledBatch` of these seed nodes (distinct global ids)."""
        seeds = np.asarray(seeds, dtype=np.int64)
        nodes, blocks = seeds, []
        try:
            self._local[seeds] = np.arange(seeds.shape[0])
            for fanout in reversed(self.fanouts):  # the last layer's block is sampled first
                block, nodes = self._hop(nodes, fanout)
                blocks.append(block)
        finally:
            self._local[nodes] = -1
        return SampledBatch(nodes, blocks[::-1], seeds.shape[0])

    def _hop(self, targets, fanout):
        """One block: for each target, up to `fanout` in-neighbours; sources = targets + new nodes."""
        target_rows, neighbours = self._sample_neighbours(targets, fanout)
        new = np.unique(neighbours[self._local[neighbours] < 0])
        self._local[new] = np.arange(targets.shape[0], targets.shape[0] + new.shape[0])
        sources = np.concatenate([targets, new])
        block, _ = SparsePattern.from_coo(target_rows, self._local[neighbours],
                                          (targets.shape[0], sources.shape[0]))
        return block, sources

    def _sample_neighbours(self, targets, fanout):
        """(local target row, global neighbour id) of the kept edges."""
        indptr = self.pattern.indptr
        starts, degrees = indptr[targets], indptr[targets + 1] - indptr[targets]
        keep = degrees if fanout < 0 else np.minimum(degrees, fanout)
        edge_rows = np.repeat(np.arange(targets.shape[0]), degrees)
        offsets = np.arange(edge_rows.shape[0]) - np.repeat(np.cumsum(degrees) - degrees, degrees)
        candidates = np.repeat(starts, degrees) + offsets  # every in-edge of every target
        if fanout >= 0 and np.any(degrees > fanout):
            # Uniform without replacement: a random key per edge, keep the `keep` smallest per target.
            keys = self.generator.random(candidates.shape[0])
            order = np.lexsort((keys, edge_rows))
            rank = np.arange(order.shape[0]) - np.repeat(np.cumsum(degrees) - degrees, degrees)
            chosen = order[rank < np.repeat(keep, degrees)]
            edge_rows, candidates = edge_rows[chosen], candidates[chosen]
        return edge_rows, self.pattern.indices[candidates]
