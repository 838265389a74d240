"""Memory planning: every computed value gets a slice of a reusable block, chosen by liveness.

The plan is made once per compiled graph. A value lives from the step that writes it to the last
step that reads it (or any view of it); afterwards its block returns to a free list and a later
value of a size that fits takes it over. An elementwise step may write straight into the block of
an input that dies at that step (in-place update). Graph outputs live to the end. Parameters and
optimizer state are not planned: the graph updates them in place where they are.
"""
import numpy as np

_ALIGN = 64  # bytes: one cache line, enough for any SIMD load


def aligned_bytes(nbytes, fill=None):
    """A uint8 array of `nbytes` starting on a 64-byte boundary (numpy's allocator only promises
    16): a kernel's row loads then never split a cache line because of where malloc put the
    array. `fill` (a byte value) initialises it."""
    raw = np.empty(nbytes + _ALIGN, np.uint8) if fill is None else np.full(nbytes + _ALIGN, fill, np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN
    return raw[offset:offset + nbytes]


def aligned_zeros(shape, dtype):
    """np.zeros(shape, dtype) starting on a 64-byte boundary (see aligned_bytes)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return aligned_bytes(count * dtype.itemsize, fill=0).view(dtype).reshape(shape)


class Step:
    """What one executor step does to memory: roots it writes, roots it reads, in-place allowed."""

    __slots__ = ("writes", "reads", "inplace")

    def __init__(self, writes, reads, inplace=False):
        self.writes = writes    # nodes needing their own storage, in output order
        self.reads = reads      # storage roots read by the step
        self.inplace = inplace  # elementwise: an output may share the block of a dying same-size input


class MemoryPlan:
    """Block sizes and which block each planned value uses."""

    def __init__(self, block_sizes, assignment, naive_bytes):
        self.block_sizes = block_sizes
        self.assignment = assignment  # id(node) -> block index
        self.naive_bytes = naive_bytes  # what one buffer per value would take

    @property
    def planned_bytes(self):
        return int(sum(self.block_sizes))

    def allocate(self):
        """One aligned uint8 array per block."""
        return [aligned_bytes(size) for size in self.block_sizes]

    def buffer(self, blocks, node):
        """The node's array: a typed, shaped view of the start of its block."""
        block = blocks[self.assignment[id(node)]]
        return block[:node.nbytes].view(node.dtype).reshape(node.shape)


def _last_uses(steps, pinned):
    last = {}
    for i, step in enumerate(steps):
        for n in step.writes:
            last.setdefault(id(n), i)  # a value nobody reads dies where it is written
        for r in step.reads:
            last[id(r)] = i
    for key in pinned:
        last[key] = len(steps)
    return last


def _take_free(free, sizes, nbytes):
    """Index of the smallest free block that fits (and is not wastefully large), or None."""
    best = None
    for block in free:
        size = sizes[block]
        if nbytes <= size <= 2 * nbytes + _ALIGN and (best is None or size < sizes[best]):
            best = block
    if best is not None:
        free.remove(best)
    return best


def plan_memory(steps, pinned=()):
    """Assign blocks to the values `steps` write; values in `pinned` (ids) live to the end."""
    last = _last_uses(steps, set(pinned))
    sizes, assignment, free, naive = [], {}, [], 0
    for i, step in enumerate(steps):
        taken = set()
        for n in step.writes:
            nbytes = max(int(n.nbytes), 1)
            naive += nbytes
            block = _inplace_block(step, n, i, last, assignment, taken) if step.inplace else None
            if block is None:
                block = _take_free(free, sizes, nbytes)
            if block is None:
                sizes.append(nbytes)
                block = len(sizes) - 1
            assignment[id(n)] = block
            taken.add(block)
        dying = {id(r) for r in step.reads if last.get(id(r)) == i}
        dying |= {id(n) for n in step.writes if last.get(id(n)) == i}
        for key in dying:
            block = assignment.get(key)
            if block is not None and block not in free and not _still_used(block, assignment, last, i):
                free.append(block)
    return MemoryPlan(sizes, assignment, naive)


def _inplace_block(step, out, i, last, assignment, taken):
    for r in step.reads:
        block = assignment.get(id(r))
        if (block is not None and block not in taken and last.get(id(r)) == i and r.nbytes == out.nbytes
                and r.shape == out.shape):
            return block
    return None


def _still_used(block, assignment, last, i):
    """True when another value assigned to `block` is read after step i."""
    return any(b == block and last.get(key, -1) > i for key, b in assignment.items())
