"""The optimizer-shard collectives as graph ops: what a compiled ZeRO step runs (see optimizer_shard).

    reduce_scatter_shards(grads)           every sharded gradient flattened, padded to n chunks,
                                           the chunks of all of them laid side by side as an
                                           (n, total) array, reduce-scattered: this rank's (total,)
    gather_shards(full params, chunks)     all-gather every rank's (total,) chunks and write each
                                           parameter's first `numel` gathered values in place

`layout` is a tuple of (numel, chunk, offset) per sharded parameter; `total` the sum of chunks.
Their kernels in a compiled plan are strided copies and one MPI_Reduce_scatter_block /
MPI_Allgather called from C (mstrain.communication.graph_kernels); eagerly they run in numpy.
"""
import numpy as np

from ..communication import graph_kernels as _gk
from ..communication.transport import all_gather_array, reduce_scatter_array
from ..ops.primitive import apply, defop, register_rule


def _pack(arrays, layout, total, n, dtype):
    send = np.zeros((n, total), dtype)
    for a, (numel, chunk, offset) in zip(arrays, layout):
        padded = np.zeros(chunk * n, dtype)
        padded[:numel] = np.ravel(a)
        send[:, offset:offset + chunk] = padded.reshape(n, chunk)
    return send


@defop("zero_reduce_scatter", attrs=("layout", "total", "group", "scale"), stateful=True, differentiable=False)
def _reduce_scatter(*grads, layout, total, group, scale=1.0):
    dtype = np.result_type(*[g.dtype for g in grads])
    mine = reduce_scatter_array(_pack(grads, layout, total, group.size, dtype).reshape(-1), group)
    if scale != 1.0:
        mine *= np.asarray(scale, mine.dtype)
    return mine


def _gather_into(*arrays, layout, total, group):
    k = len(layout)
    params, chunks = arrays[:k], arrays[k:]
    dtype = np.result_type(*[c.dtype for c in chunks])
    send = np.empty(total, dtype)
    for c, (numel, chunk, offset) in zip(chunks, layout):
        send[offset:offset + chunk] = np.ravel(c)
    gathered = all_gather_array(send, group).reshape(group.size, total)
    for p, (numel, chunk, offset) in zip(params, layout):
        np.copyto(p, gathered[:, offset:offset + chunk].reshape(-1)[:numel].reshape(p.shape), casting="same_kind")
    return params[0]


_GATHERS = {}


def _gather_prim(k):
    """The gather op for k sharded parameters (it writes its first k inputs in place)."""
    prim = _GATHERS.get(k)
    if prim is None:
        prim = _GATHERS[k] = defop(f"zero_gather_{k}", attrs=("layout", "total", "group"), stateful=True,
                                   differentiable=False, mutates=tuple(range(k)))(_gather_into)
        _register_gather(prim.name)
    return prim


def reduce_scatter_shards(grads, layout, total, group, scale=1.0):
    """This rank's (total,) chunk of the summed, packed gradients times `scale` (a Tensor)."""
    return apply(_reduce_scatter, *grads, layout=tuple(layout), total=int(total), group=group, scale=float(scale))


def gather_shards(params, chunks, layout, total, group):
    """Write every rank's updated chunks back into the full Parameters `params` (in place)."""
    return apply(_gather_prim(len(params)), *params, *chunks, layout=tuple(layout), total=int(total), group=group)


# ---------------------------------------------------------------------------------------------
# Kernels of a compiled plan
# ---------------------------------------------------------------------------------------------

def _row_copies(flat, table, chunk):
    """Copy steps placing the flat array `flat` (numel values) into `table` ((n, chunk) view):
    whole rows first, then the part of the last row (the rest of the table stays padding)."""
    numel = flat.size
    full, rest = divmod(numel, chunk)
    pairs = []
    if full:
        pairs.append((flat[:full * chunk].reshape(full, chunk), table[:full]))
    if rest:
        pairs.append((flat[full * chunk:], table[full, :rest]))
    return pairs


def _flat_source(array, pairs):
    """`array` as a flat view; a non-contiguous one is first copied (a step added to `pairs`) into
    a staging buffer, since reshaping it would copy once, at bind time, instead of every step."""
    if array.flags.c_contiguous:
        return array.reshape(-1)
    staging = np.empty(array.shape, array.dtype)
    pairs.append((array, staging))
    return staging.reshape(-1)


def _reduce_scatter_kernel(node, ins, outs):
    layout, total, group = node.attrs["layout"], node.attrs["total"], node.attrs["group"]
    scale = float(node.attrs.get("scale", 1.0))
    out = outs[0]
    n = group.size
    send = np.zeros((n, total), out.dtype)  # padding stays zero: only the gradients are copied in
    pairs = []
    for g, (numel, chunk, offset) in zip(ins, layout):
        pairs += _row_copies(_flat_source(np.asarray(g), pairs), send[:, offset:offset + chunk], chunk)
    comm = group.require_member()

    def run():
        for src, dst in pairs:
            np.copyto(dst, src, casting="same_kind")
        comm.Reduce_scatter_block(send.reshape(-1), out, op=_gk._op("sum"))
        if scale != 1.0:
            out *= np.asarray(scale, out.dtype)
    kind = _gk._SCALE_KINDS.get(out.dtype)
    native = kind is not None and _gk._native_ready(out.dtype, comm)
    if not native or any(np.asarray(g).dtype != out.dtype for g in ins):
        return _gk.CollectiveKernel(run)
    steps = [_gk._copy_step(src, dst) for src, dst in pairs]
    steps.append(("ms_reduce_scatter", (send, out), [total, _gk._handle(_gk._datatype(out.dtype)),
                                                     _gk._handle(_gk._op("sum")), _gk._handle(comm),
                                                     kind if scale != 1.0 else 0, _gk._bits(scale)]))
    return _gk.CollectiveKernel(run, steps)


def _gather_kernel(node, ins, outs):
    layout, total, group = node.attrs["layout"], node.attrs["total"], node.attrs["group"]
    k = len(layout)
    params, chunks = ins[:k], ins[k:]
    dtype = np.asarray(chunks[0]).dtype
    send = np.empty(total, dtype)
    gathered = np.empty((group.size, total), dtype)
    if not all(np.asarray(p).flags.c_contiguous for p in params):
        return None  # the primitive's own numpy path writes non-contiguous parameters correctly
    packs = []
    for c, (_, chunk, offset) in zip(chunks, layout):
        packs.append((_flat_source(np.asarray(c), packs), send[offset:offset + chunk]))
    unpacks = []
    for p, (numel, chunk, offset) in zip(params, layout):
        unpacks += [(table, flat) for flat, table in _row_copies(p.reshape(-1), gathered[:, offset:offset + chunk], chunk)]
    comm = group.require_member()

    def run():
        for src, dst in packs:
            np.copyto(dst, src)
        comm.Allgather(send, gathered)
        for src, dst in unpacks:
            np.copyto(dst, src, casting="same_kind")
    same = all(np.asarray(a).dtype == dtype for a in ins)
    if not same or not _gk._native_ready(dtype, comm):
        return _gk.CollectiveKernel(run)
    steps = [_gk._copy_step(src, dst) for src, dst in packs]
    steps.append(("ms_allgather", (send, gathered), [total, _gk._handle(_gk._datatype(dtype)), _gk._handle(comm)]))
    steps += [_gk._copy_step(src, dst) for src, dst in unpacks]
    return _gk.CollectiveKernel(run, steps)


def _register_gather(name):
    register_rule("host_kernel", name)(_gather_kernel)


def _register():
    register_rule("host_kernel", "zero_reduce_scatter")(_reduce_scatter_kernel)


_register()
