"""Index range checks around a compiled step whose gathers run as C kernels.

A native gather or scatter-add (mstrain.kernels.gather) inside the C step loop cannot raise: an
index out of range leaves zeros and is counted in the kernel's `index_status`. So that a bad id
still fails as eager's np.take does, before any step of the run changes a weight:

- an index that is a graph input (or all of one, reshaped) is checked over every batch of the run
  before the loop: `check_inputs(batches)` raises eager's IndexError naming the input and the batch;
- an index computed inside the step (e.g. an embedding's clamped ids, in range by construction)
  cannot be seen beforehand: `raise_bad()` after the run raises if a kernel met one.
"""
import numpy as np

from ..kernels.gather import first_bad_index


def _axis(node):
    return node.attrs.get("axis", 0)


class IndexGuards:
    """The native gathers of a bound plan and the graph inputs that feed their indices."""

    def __init__(self, graph_name, plan_nodes, plan, input_buffers):
        self.graph_name = graph_name
        self.kernels = [(node, kernel) for node, kernel in zip(plan_nodes, plan) if hasattr(kernel, "index_status")]
        self.inputs = []  # (input position, axis size, node)
        for node, kernel in self.kernels:
            index, size = kernel.index_check
            for position, buffer in enumerate(input_buffers):
                if index.size == buffer.size and np.may_share_memory(index, buffer):
                    self.inputs.append((position, size, node))

    def __bool__(self):
        return bool(self.kernels)

    def check_inputs(self, batches):
        """Raise eager's IndexError when an input index of any batch is out of range (none has run)."""
        for position, size, node in self.inputs:
            for number, batch in enumerate(batches):
                ids = np.asarray(batch[position])
                if ids.size and (ids.min() < -size or ids.max() >= size):
                    bad = first_bad_index(ids, size)
                    raise IndexError(f"index {bad} is out of bounds for axis {_axis(node)} with size {size} "
                                     f"(input {position} of {self.graph_name}, batch {number} of this run, "
                                     f"read by {node.prim.name}); no step of the run was executed")

    def reset(self):
        for _, kernel in self.kernels:
            kernel.index_status[:] = 0

    def raise_bad(self):
        """Raise when a kernel met an index computed inside the step that was out of range."""
        for node, kernel in self.kernels:
            count, first = (int(v) for v in kernel.index_status)
            if count:
                kernel.index_status[:] = 0
                size = kernel.index_check[1]
                raise IndexError(f"index {first} is out of bounds for axis {_axis(node)} with size {size} "
                                 f"({node.prim.name} in {self.graph_name}: {count} such indices computed inside "
                                 f"the compiled step; their rows were left zero)")
