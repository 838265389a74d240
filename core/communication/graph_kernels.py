"""Collectives as kernels of a compiled plan: MPI called from C on the plan's own buffers.

A compiled step (GRAPH_MODE, the sink runner) binds every collective node of its graph to
buffers planned once. This module gives the executor a kernel for each collective primitive
(`all_reduce`, `all_reduce_packed`, `all_gather`, `reduce_scatter`, `broadcast`, the Megatron
region ops, the semi-auto redistribution ops; parallel/zero_ops.py and parallel/pipeline_ops.py
add the optimizer-shard and pipeline ones): small C functions that call the MPI library mpi4py
loaded (`MPI_Allreduce`, `MPI_Allgather`, `MPI_Reduce_scatter_block`, `MPI_Bcast`, `MPI_Isend`,
`MPI_Recv`, `MPI_Wait`) on those buffers, plus strided copies for the slicing and re-assembling
around them. The C step loop then runs a data-parallel, ZeRO, semi-auto or pipeline step
without returning to Python.

Where the MPI library cannot be reached from C (no compiler, an MPI whose handles are not
integers or pointers, a dtype MPI has no type for), the kernel is the same collective through
mpi4py's buffer API on the same preallocated buffers (one Python call per collective per step).
"""
import ctypes
import os
import struct

import numpy as np

_SOURCE = r"""#include <cstdint>
#include <cstring>
typedef int (*allreduce_t)(const void*, void*, int, intptr_t, intptr_t, intptr_t);
typedef int (*allgather_t)(const void*, int, intptr_t, void*, int, intptr_t, intptr_t);
typedef int (*reduce_scatter_t)(const void*, void*, int, intptr_t, intptr_t, intptr_t);
typedef int (*isend_t)(const void*, int, intptr_t, int, int, intptr_t, void*);
typedef int (*recv_t)(void*, int, intptr_t, int, int, intptr_t, void*);
typedef int (*wait_t)(void*, void*);
typedef int (*bcast_t)(void*, int, intptr_t, int, intptr_t);
static allreduce_t g_allreduce = nullptr;
static allgather_t g_allgather = nullptr;
static reduce_scatter_t g_reduce_scatter = nullptr;
static isend_t g_isend = nullptr;
static recv_t g_recv = nullptr;
static wait_t g_wait = nullptr;
static bcast_t g_bcast = nullptr;

extern "C" void ms_comm_set(void* allreduce, void* allgather, void* reduce_scatter, void* isend, void* recv,
                            void* wait, void* bcast) {
  g_allreduce = reinterpret_cast<allreduce_t>(allreduce);
  g_allgather = reinterpret_cast<allgather_t>(allgather);
  g_reduce_scatter = reinterpret_cast<reduce_scatter_t>(reduce_scatter);
  g_isend = reinterpret_cast<isend_t>(isend);
  g_recv = reinterpret_cast<recv_t>(recv);
  g_wait = reinterpret_cast<wait_t>(wait);
  g_bcast = reinterpret_cast<bcast_t>(bcast);
}

/* p = {staging, src, request slot}; n = {nbytes, count, datatype, dest, tag, comm}: the value is
   copied aside first, so the plan may reuse the source buffer while the send is in flight */
extern "C" void ms_isend(void** p, const int64_t* n) {
  std::memcpy(p[0], p[1], n[0]);
  g_isend(p[0], static_cast<int>(n[1]), n[2], static_cast<int>(n[3]), static_cast<int>(n[4]), n[5], p[2]);
}

/* p = {recv, status}; n = {count, datatype, source, tag, comm} */
extern "C" void ms_recv(void** p, const int64_t* n) {
  g_recv(p[0], static_cast<int>(n[0]), n[1], static_cast<int>(n[2]), static_cast<int>(n[3]), n[4], p[1]);
}

/* p = {status, request slot...}; n = {number of slots} */
extern "C" void ms_wait(void** p, const int64_t* n) {
  for (int64_t i = 0; i < n[0]; ++i) g_wait(p[1 + i], p[0]);
}

/* p = {src, buffer}; n = {nbytes, count, datatype, root, comm} */
extern "C" void ms_bcast(void** p, const int64_t* n) {
  if (p[0] != p[1]) std::memcpy(p[1], p[0], n[0]);
  g_bcast(p[1], static_cast<int>(n[1]), n[2], static_cast<int>(n[3]), n[4]);
}

/* x *= scale for `count` elements (is_double: double, else float); scale as the bits of a double */
static void scale_buffer(void* x, int64_t count, int64_t is_double, int64_t bits) {
  double s;
  std::memcpy(&s, &bits, sizeof s);
  if (is_double) { double* d = static_cast<double*>(x); for (int64_t i = 0; i < count; ++i) d[i] *= s; }
  else { float* f = static_cast<float*>(x); const float sf = static_cast<float>(s);
         for (int64_t i = 0; i < count; ++i) f[i] *= sf; }
}

/* p = {send, recv}; n = {count, datatype, op, comm, scale_kind (0 none, 1 float, 2 double), scale bits} */
extern "C" void ms_allreduce(void** p, const int64_t* n) {
  g_allreduce(p[0], p[1], static_cast<int>(n[0]), n[1], n[2], n[3]);
  if (n[4]) scale_buffer(p[1], n[0], n[4] == 2, n[5]);
}

/* p = {send, recv}; n = {count per rank, datatype, comm} */
extern "C" void ms_allgather(void** p, const int64_t* n) {
  g_allgather(p[0], static_cast<int>(n[0]), n[1], p[1], static_cast<int>(n[0]), n[1], n[2]);
}

/* p = {send, recv}; n = {count per rank, datatype, op, comm, scale_kind, scale bits} */
extern "C" void ms_reduce_scatter(void** p, const int64_t* n) {
  g_reduce_scatter(p[0], p[1], static_cast<int>(n[0]), n[1], n[2], n[3]);
  if (n[4]) scale_buffer(p[1], n[0], n[4] == 2, n[5]);
}

/* p = {src, dst}; n = {ndim, itemsize, shape[ndim], src strides[ndim], dst strides[ndim]} (bytes) */
static void copy_dim(const char* src, char* dst, const int64_t* n, int64_t d) {
  const int64_t ndim = n[0], itemsize = n[1];
  const int64_t* shape = n + 2; const int64_t* ss = shape + ndim; const int64_t* ds = ss + ndim;
  if (d == ndim) { std::memcpy(dst, src, itemsize); return; }
  if (d == ndim - 1 && ss[d] == itemsize && ds[d] == itemsize) {
    std::memcpy(dst, src, shape[d] * itemsize); return;
  }
  for (int64_t i = 0; i < shape[d]; ++i) copy_dim(src + i * ss[d], dst + i * ds[d], n, d + 1);
}

extern "C" void ms_strided_copy(void** p, const int64_t* n) {
  copy_dim(static_cast<const char*>(p[0]), static_cast<char*>(p[1]), n, 0);
}
"""

_SCALE_KINDS = {np.dtype(np.float32): 1, np.dtype(np.float64): 2}
_MPI_FUNCTIONS = ("MPI_Allreduce", "MPI_Allgather", "MPI_Reduce_scatter_block", "MPI_Isend", "MPI_Recv",
                  "MPI_Wait", "MPI_Bcast")


class _Native:
    library = None
    failed = False
    mpi = None


def _mpi_library():
    """The MPI shared library mpi4py loaded (found among this process's mapped files), or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/libmpi" in line and ".so" in line}
    except OSError:
        return None
    for path in sorted(paths, key=len):
        if os.path.basename(path).startswith("libmpi.so") or os.path.basename(path).startswith("libmpi_"):
            try:
                library = ctypes.CDLL(path)
            except OSError:
                continue
            if all(hasattr(library, s) for s in _MPI_FUNCTIONS):
                return library
    return None


def native_library():
    """The compiled collective kernels wired to the process's MPI, or None (then mpi4py is used)."""
    if _Native.library is None and not _Native.failed:
        _Native.failed = True
        from ..graph import build
        if not build.native_enabled():
            return None
        try:
            from mpi4py import MPI  # noqa: F401  (loads the MPI library)
        except ImportError:
            return None
        mpi = _mpi_library()
        if mpi is None:
            return None
        try:
            path = build.compile_all([_SOURCE])[0]
        except (OSError, build.KernelBuildError):
            return None
        library = ctypes.PyDLL(path)
        address = lambda name: ctypes.cast(getattr(mpi, name), ctypes.c_void_p).value  # noqa: E731
        library.ms_comm_set(*[ctypes.c_void_p(address(name)) for name in _MPI_FUNCTIONS])
        _Native.library, _Native.mpi, _Native.failed = library, mpi, False
    return _Native.library


def _handle(obj):
    from mpi4py import MPI
    value = MPI._handleof(obj)
    return int(value) if isinstance(value, int) else None


def _datatype(dtype):
    from mpi4py import MPI
    names = {"float32": "FLOAT", "float64": "DOUBLE", "int32": "INT32_T", "int64": "INT64_T", "int8": "INT8_T",
             "uint8": "UINT8_T", "bool": "C_BOOL", "int16": "INT16_T"}
    name = names.get(np.dtype(dtype).name)
    return None if name is None else getattr(MPI, name)


def _op(op):
    from mpi4py import MPI
    return getattr(MPI, {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN", "prod": "PROD"}[op])


def _bits(value):
    return struct.unpack("<q", struct.pack("<d", float(value)))[0]


# ---------------------------------------------------------------------------------------------
# A kernel: a Python fallback with an optional list of C calls attached as `native`
# ---------------------------------------------------------------------------------------------

class CollectiveKernel:
    """Zero-argument kernel of a plan. `native` = ("steps", [(C function, pointers, params)]) when
    every step runs in C (the step runner then issues them without entering Python)."""

    __slots__ = ("run", "native", "_keep")

    def __init__(self, run, steps=None):
        self.run = run
        self.native = None
        self._keep = []
        if steps is not None:
            self.native = ("steps", [self._instr(*s) for s in steps])

    def _instr(self, symbol, arrays, params):
        library = native_library()
        pointers = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
        values = (ctypes.c_int64 * max(1, len(params)))(*[int(v) for v in params])
        self._keep.append((arrays, pointers, values))
        return getattr(library, symbol), pointers, values

    def __call__(self):
        self.run()


def _copy_params(src, dst):
    """ms_strided_copy params copying `src` (an ndarray view) into `dst` (same shape)."""
    if src.shape != dst.shape or src.dtype != dst.dtype:
        raise ValueError(f"strided copy {src.dtype}{src.shape} -> {dst.dtype}{dst.shape}")
    return [src.ndim, src.itemsize, *src.shape, *src.strides, *dst.strides]


def _copy_step(src, dst):
    return ("ms_strided_copy", (src, dst), _copy_params(src, dst))


def _contiguous(array, steps):
    """`array` if C-contiguous, else a staging buffer filled by a copy step added to `steps`."""
    if array.flags.c_contiguous:
        return array
    staging = np.empty(array.shape, array.dtype)
    steps.append(_copy_step(array, staging))
    return staging


def _native_ready(dtype, comm):
    return (native_library() is not None and _datatype(dtype) is not None and _handle(comm) is not None
            and _handle(_datatype(dtype)) is not None)


def _scale(op, size, dtype):
    if op != "mean":
        return [0, 0]
    kind = _SCALE_KINDS.get(np.dtype(dtype))
    return None if kind is None else [kind, _bits(1.0 / size)]


# ---------------------------------------------------------------------------------------------
# Builders: (node attrs, input arrays, output array) -> CollectiveKernel
# ---------------------------------------------------------------------------------------------

def _copy_kernel(src, out):
    src_view = np.asarray(src)
    steps = [_copy_step(src_view, out)] if native_library() is not None and src_view.shape == out.shape else None
    return CollectiveKernel(lambda: np.copyto(out, src), steps)


def all_reduce_kernel(x, out, group, op="sum"):
    if group.size == 1:
        return _copy_kernel(x, out)
    comm = group.require_member()
    send_view = np.asarray(x)
    steps = []
    send = _contiguous(send_view, steps) if send_view.shape == out.shape else None
    scale = _scale(op, group.size, out.dtype)
    native = send is not None and out.flags.c_contiguous and scale is not None and _native_ready(out.dtype, comm)
    if native:
        steps.append(("ms_allreduce", (send, out),
                      [out.size, _handle(_datatype(out.dtype)), _handle(_op(op)), _handle(comm), *scale]))
    return CollectiveKernel(lambda: _mpi_all_reduce(comm, send_view, out, op, group.size), steps if native else None)


def _mpi_all_reduce(comm, x, out, op, size):
    comm.Allreduce(np.ascontiguousarray(x), out, op=_op(op))
    if op == "mean":
        out /= size


def all_reduce_packed_kernel(arrays, out, group, op="sum"):
    """Pack `arrays` (flattened, in order) into one buffer and all-reduce it into `out`."""
    arrays = [np.asarray(a) for a in arrays]
    packed = np.empty(out.shape, out.dtype)
    pieces, offset = [], 0
    for a in arrays:
        pieces.append((a, packed[offset:offset + a.size].reshape(a.shape)))
        offset += a.size
    comm = group.require_member() if group.size > 1 else None

    def run():
        for a, piece in pieces:
            np.copyto(piece, a)
        if comm is None:
            np.copyto(out, packed)
        else:
            _mpi_all_reduce(comm, packed, out, op, group.size)
    scale = _scale(op, group.size, out.dtype)
    if comm is None or scale is None or not _native_ready(out.dtype, comm):
        return CollectiveKernel(run)
    steps = [_copy_step(a, piece) for a, piece in pieces]
    steps.append(("ms_allreduce", (packed, out),
                  [out.size, _handle(_datatype(out.dtype)), _handle(_op(op)), _handle(comm), *scale]))
    return CollectiveKernel(run, steps)


def all_gather_kernel(x, out, group, axis=0):
    """Concatenation of every rank's `x` along `axis` into `out`."""
    if group.size == 1:
        return _copy_kernel(x, out)
    comm = group.require_member()
    x = np.asarray(x)
    n = group.size
    staging = np.empty((n,) + x.shape, x.dtype)
    axis = axis % max(x.ndim, 1)
    targets = [_axis_block(out, axis, i, x.shape[axis] if x.ndim else 1) for i in range(n)] if x.ndim else \
        [out[i] for i in range(n)]

    def run():
        comm.Allgather(np.ascontiguousarray(x), staging)
        for i in range(n):
            np.copyto(targets[i], staging[i])
    if not _native_ready(x.dtype, comm):
        return CollectiveKernel(run)
    steps = []
    send = _contiguous(x, steps)
    direct = axis == 0 and out.flags.c_contiguous and x.ndim > 0
    recv = out if direct else staging
    steps.append(("ms_allgather", (send, recv), [x.size, _handle(_datatype(x.dtype)), _handle(comm)]))
    if not direct:
        steps += [_copy_step(staging[i], targets[i]) for i in range(n)]
    return CollectiveKernel(run, steps)


def _axis_block(array, axis, index, length):
    where = [slice(None)] * array.ndim
    where[axis] = slice(index * length, (index + 1) * length)
    return array[tuple(where)]


def reduce_scatter_kernel(x, out, group, axis=0, op="sum"):
    """Reduce over the group; this rank keeps chunk `group.rank` of `axis`."""
    if group.size == 1:
        return _copy_kernel(x, out)
    comm = group.require_member()
    x = np.asarray(x)
    axis = axis % x.ndim
    moved = np.moveaxis(x, axis, 0)
    staging_in = np.empty(moved.shape, x.dtype)
    staging_out = np.empty((moved.shape[0] // group.size,) + moved.shape[1:], x.dtype)
    out_moved = np.moveaxis(out, axis, 0)

    def run():
        np.copyto(staging_in, moved)
        comm.Reduce_scatter_block(staging_in, staging_out, op=_op(op))
        if op == "mean":
            staging_out /= group.size
        np.copyto(out_moved, staging_out)
    scale = _scale(op, group.size, x.dtype)
    if scale is None or not _native_ready(x.dtype, comm):
        return CollectiveKernel(run)
    steps = []
    send = moved if moved.flags.c_contiguous else None
    if send is None:
        steps.append(_copy_step(moved, staging_in))
        send = staging_in
    direct = out_moved.flags.c_contiguous
    recv = out_moved if direct else staging_out
    steps.append(("ms_reduce_scatter", (send, recv),
                  [staging_out.size, _handle(_datatype(x.dtype)), _handle(_op(op)), _handle(comm), *scale]))
    if not direct:
        steps.append(_copy_step(staging_out, out_moved))
    return CollectiveKernel(run, steps)


def broadcast_kernel(x, out, group, root=0):
    """Every rank's `out` = group rank `root`'s `x`."""
    if group.size == 1:
        return _copy_kernel(x, out)
    comm = group.require_member()
    x = np.asarray(x)

    def run():
        np.copyto(out, x)
        comm.Bcast(out, root=root)
    if not (_native_ready(out.dtype, comm) and out.flags.c_contiguous):
        return CollectiveKernel(run)
    steps = []
    src = _contiguous(x, steps)
    steps.append(("ms_bcast", (src, out), [out.nbytes, out.size, _handle(_datatype(out.dtype)), root, _handle(comm)]))
    return CollectiveKernel(run, steps)


def slice_kernel(x, out, index):
    """`out` = x[index] (a local block: no communication)."""
    view = np.asarray(x)[index]
    steps = [_copy_step(view, out)] if native_library() is not None and view.shape == out.shape else None
    return CollectiveKernel(lambda: np.copyto(out, view), steps)


def gather_layout_kernel(x, out, layout, group):
    """The whole tensor of `layout` from every rank's block (all-gather, then each block in place)."""
    x = np.asarray(x)
    if group.size == 1:
        return _copy_kernel(x, out)
    comm = group.require_member()
    n = group.size
    staging = np.empty((n,) + x.shape, x.dtype)
    placed, copies = set(), []
    for i, rank in enumerate(group.ranks):
        block = layout.block_index(rank)
        if block not in placed:
            placed.add(block)
            copies.append((staging[i], out[layout.block_slices(rank)]))

    def run():
        comm.Allgather(np.ascontiguousarray(x), staging)
        for src, dst in copies:
            np.copyto(dst, src)
    if not _native_ready(x.dtype, comm):
        return CollectiveKernel(run)
    steps = []
    send = _contiguous(x, steps)
    steps.append(("ms_allgather", (send, staging), [x.size, _handle(_datatype(x.dtype)), _handle(comm)]))
    steps += [_copy_step(src, dst) for src, dst in copies]
    return CollectiveKernel(run, steps)


# ---------------------------------------------------------------------------------------------
# The executor's table: primitive name -> builder(node, inputs, outputs)
# ---------------------------------------------------------------------------------------------

def _own_chunk_index(x, group, axis):
    axis = axis % np.ndim(x)
    step = np.shape(x)[axis] // group.size
    index = [slice(None)] * np.ndim(x)
    index[axis] = slice(group.rank * step, (group.rank + 1) * step)
    return tuple(index)


def _block_index(src, dst, rank):
    return tuple(slice(d.start - s.start, d.stop - s.start)
                 for d, s in zip(dst.block_slices(rank), src.block_slices(rank)))


def _builders():
    def a(node, key, default=None):
        return node.attrs.get(key, default)
    return {
        "all_reduce": lambda n, i, o: all_reduce_kernel(i[0], o[0], a(n, "group"), a(n, "op", "sum")),
        "all_reduce_packed": lambda n, i, o: all_reduce_packed_kernel(i, o[0], a(n, "group"), a(n, "op", "sum")),
        "broadcast": lambda n, i, o: broadcast_kernel(i[0], o[0], a(n, "group"), a(n, "root", 0)),
        "reduce_from_region": lambda n, i, o: all_reduce_kernel(i[0], o[0], a(n, "group"), "sum"),
        "copy_to_region": lambda n, i, o: _copy_kernel(i[0], o[0]),
        "all_gather": lambda n, i, o: all_gather_kernel(i[0], o[0], a(n, "group"), a(n, "axis", 0)),
        "gather_from_region": lambda n, i, o: all_gather_kernel(i[0], o[0], a(n, "group"),
                                                                a(n, "axis", -1) % max(np.ndim(i[0]), 1)),
        "reduce_scatter": lambda n, i, o: reduce_scatter_kernel(i[0], o[0], a(n, "group"), a(n, "axis", 0),
                                                                a(n, "op", "sum")),
        "scatter_to_region": lambda n, i, o: slice_kernel(i[0], o[0], _own_chunk_index(i[0], a(n, "group"),
                                                                                       a(n, "axis", -1))),
    }


def _redistribution_builders():
    def a(node, key, default=None):
        return node.attrs.get(key, default)
    return {
        "spmd_gather_full": lambda n, i, o: gather_layout_kernel(i[0], o[0], a(n, "layout"), a(n, "group")),
        "spmd_slice_block": lambda n, i, o: slice_kernel(i[0], o[0], _block_index(a(n, "src"), a(n, "dst"),
                                                                                  a(n, "rank"))),
    }


def _register_all(builders):
    from ..ops.primitive import register_rule
    for name, build in builders.items():
        register_rule("host_kernel", name)(build)


def register():
    """Give the executor the collectives' kernels (called when mstrain.communication is imported)."""
    _register_all(_builders())


def register_redistribution():
    """The same for the layout changes of mstrain.parallel.spmd (called when it defines them)."""
    _register_all(_redistribution_builders())
