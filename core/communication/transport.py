"""Collectives on numpy arrays, blocking and non-blocking (the layer under the differentiable ops).

Buffers go to MPI as they are when they are C-contiguous (mpi4py reads the numpy buffer in
place); only non-contiguous inputs are copied once. A group of one rank short-circuits without
touching MPI, so single-process runs pay nothing.

Non-blocking calls return a `CommHandle`; `handle.wait()` returns the result array.
"""
import numpy as np

from .management import get_group

_MPI_OP_NAMES = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN", "prod": "PROD"}


class ReduceOp:
    """MindSpore's reduction names."""
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PROD = "prod"
    MEAN = "mean"


def _mpi_op(op):
    if op not in _MPI_OP_NAMES:
        raise ValueError(f"unknown reduce op {op!r}; known: {', '.join(_MPI_OP_NAMES)}")
    from mpi4py import MPI
    return getattr(MPI, _MPI_OP_NAMES[op])


def _contiguous(array):
    array = np.asarray(array)
    return array if array.flags.c_contiguous else array.copy(order="C")


class CommHandle:
    """A pending collective: `wait()` blocks until it is done and returns its result."""

    __slots__ = ("_request", "_result", "_finish")

    def __init__(self, request, result, finish=None):
        self._request = request
        self._result = result
        self._finish = finish

    def wait(self):
        if self._request is not None:
            self._request.Wait()
            self._request = None
            if self._finish is not None:
                self._result = self._finish(self._result)
                self._finish = None
        return self._result

    def is_completed(self):
        return self._request is None or bool(self._request.Test())


_DONE = None


def _done(result):
    return CommHandle(_DONE, result)


# ---- all-reduce -------------------------------------------------------------------------------

def all_reduce_array(array, group=None, op="sum", out=None):
    """Reduce `array` over the group; every rank gets the result (a new array unless `out`)."""
    return iall_reduce(array, group, op, out).wait()


def iall_reduce(array, group=None, op="sum", out=None, inplace=False):
    """Non-blocking all-reduce; `inplace=True` reduces into `array` itself (MPI_IN_PLACE)."""
    g = get_group(group)
    array = _contiguous(array)
    if g.size == 1:
        if inplace:
            return _done(array)
        return _done(array if out is None else _copy_into(out, array))
    comm = g.require_member()
    finish = _mean_finish(g.size) if op == "mean" else None
    if inplace:
        from mpi4py import MPI
        return CommHandle(comm.Iallreduce(MPI.IN_PLACE, array, op=_mpi_op(op)), array, finish)
    recv = np.empty_like(array) if out is None else out
    return CommHandle(comm.Iallreduce(array, recv, op=_mpi_op(op)), recv, finish)


def _mean_finish(n):
    def finish(result):
        result /= n
        return result
    return finish


def _copy_into(out, array):
    np.copyto(out, array)
    return out


# ---- all-gather / reduce-scatter / all-to-all -------------------------------------------------

def all_gather_array(array, group=None, axis=0):
    """Concatenate every rank's `array` along `axis` (in group-rank order)."""
    return iall_gather(array, group, axis).wait()


def iall_gather(array, group=None, axis=0):
    g = get_group(group)
    array = _contiguous(array)
    if g.size == 1:
        return _done(array)
    comm = g.require_member()
    recv = np.empty((g.size,) + array.shape, array.dtype)
    axis = axis % max(array.ndim, 1)

    def finish(stacked):  # (n, *shape) -> concatenated along axis
        if array.ndim == 0:
            return stacked
        if axis == 0:
            return stacked.reshape((-1,) + array.shape[1:])
        return np.concatenate(list(stacked), axis=axis)
    return CommHandle(comm.Iallgather(array, recv), recv, finish)


def reduce_scatter_array(array, group=None, axis=0, op="sum"):
    """Reduce over the group, then rank i keeps the i-th of n equal chunks along `axis`."""
    return ireduce_scatter(array, group, axis, op).wait()


def ireduce_scatter(array, group=None, axis=0, op="sum"):
    g = get_group(group)
    array = np.asarray(array)
    if g.size == 1:
        return _done(array)
    axis = axis % array.ndim
    n = array.shape[axis]
    if n % g.size:
        raise ValueError(f"reduce_scatter: axis {axis} of size {n} does not divide by group "
                         f"{g.name!r} of {g.size} ranks (shape {array.shape})")
    comm = g.require_member()
    send = _contiguous(np.moveaxis(array, axis, 0))
    recv = np.empty((n // g.size,) + send.shape[1:], array.dtype)
    finish_mean = _mean_finish(g.size) if op == "mean" else None

    def finish(result):
        if finish_mean is not None:
            result = finish_mean(result)
        return np.moveaxis(result, 0, axis) if axis else result
    return CommHandle(comm.Ireduce_scatter_block(send, recv, op=_mpi_op(op)), recv, finish)


def all_to_all_array(array, group=None, split_axis=0, concat_axis=0):
    """Split along `split_axis` into n chunks, send chunk i to rank i, concatenate what arrives
    along `concat_axis` (in group-rank order)."""
    return iall_to_all(array, group, split_axis, concat_axis).wait()


def iall_to_all(array, group=None, split_axis=0, concat_axis=0):
    g = get_group(group)
    array = np.asarray(array)
    if g.size == 1:
        return _done(array)
    split_axis, concat_axis = split_axis % array.ndim, concat_axis % array.ndim
    n = array.shape[split_axis]
    if n % g.size:
        raise ValueError(f"all_to_all: split axis {split_axis} of size {n} does not divide by "
                         f"group {g.name!r} of {g.size} ranks (shape {array.shape})")
    comm = g.require_member()
    chunks = np.split(array, g.size, axis=split_axis)
    send = np.ascontiguousarray(np.stack(chunks))  # (n, *chunk)
    recv = np.empty_like(send)

    def finish(stacked):
        return np.concatenate(list(stacked), axis=concat_axis)
    return CommHandle(comm.Ialltoall(send, recv), recv, finish)


def all_to_all_v_array(chunks, group=None):
    """Variable-sized all-to-all (MPI_Alltoallv): `chunks[i]` (k_i rows of one row shape and dtype,
    k_i may differ and be 0) goes to group rank i; returns the list of the chunks received, one
    per rank in group-rank order. The row counts travel first, then the rows in one exchange."""
    g = get_group(group)
    chunks = [np.asarray(c) for c in chunks]
    if len(chunks) != g.size:
        raise ValueError(f"all_to_all_v: {len(chunks)} chunks for group {g.name!r} of {g.size} ranks")
    if g.size == 1:
        return [chunks[0]]
    row_shape, dtype = chunks[0].shape[1:], chunks[0].dtype
    for c in chunks:
        if c.shape[1:] != row_shape or c.dtype != dtype:
            raise ValueError(f"all_to_all_v: chunks differ in row shape or dtype ({c.shape[1:]} {c.dtype} vs "
                             f"{row_shape} {dtype})")
    from mpi4py import MPI
    comm = g.require_member()
    send_rows = np.array([c.shape[0] for c in chunks], np.int64)
    recv_rows = np.empty_like(send_rows)
    comm.Alltoall(send_rows, recv_rows)
    row_bytes = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
    send = np.concatenate([np.ascontiguousarray(c).reshape(-1).view(np.uint8) for c in chunks])
    recv = np.empty(int(recv_rows.sum()) * row_bytes, np.uint8)
    send_bytes, recv_bytes = send_rows * row_bytes, recv_rows * row_bytes
    send_offsets = np.concatenate([[0], np.cumsum(send_bytes)[:-1]])
    recv_offsets = np.concatenate([[0], np.cumsum(recv_bytes)[:-1]])
    comm.Alltoallv([send, (send_bytes.tolist(), send_offsets.tolist()), MPI.BYTE],
                   [recv, (recv_bytes.tolist(), recv_offsets.tolist()), MPI.BYTE])
    rows = recv.view(dtype).reshape((-1,) + row_shape)
    return np.split(rows, np.cumsum(recv_rows)[:-1])


# ---- rooted collectives and point to point ----------------------------------------------------

def broadcast_array(array, group=None, root=0):
    """Every rank gets group rank `root`'s array (all ranks pass an array of the same shape)."""
    g = get_group(group)
    array = np.asarray(array)
    if g.size == 1:
        return array
    buf = np.array(array, copy=True, order="C")
    g.require_member().Bcast(buf, root=root)
    return buf


def reduce_array(array, group=None, root=0, op="sum"):
    """Reduce to group rank `root`; other ranks get zeros of the same shape."""
    g = get_group(group)
    array = _contiguous(array)
    if g.size == 1:
        return array
    recv = np.zeros_like(array)
    g.require_member().Reduce(array, recv if g.rank == root else None, op=_mpi_op(op), root=root)
    return recv


def send_array(array, dest, group=None, tag=0):
    """Blocking send of `array` to group rank `dest`."""
    get_group(group).require_member().Send(_contiguous(array), dest=dest, tag=tag)


def recv_array(shape, dtype, src, group=None, tag=0, out=None):
    """Blocking receive of an array of `shape`/`dtype` from group rank `src`."""
    buf = np.empty(shape, dtype) if out is None else out
    get_group(group).require_member().Recv(buf, source=src, tag=tag)
    return buf


def isend(array, dest, group=None, tag=0):
    """Non-blocking send; keep `array` unchanged until the handle is waited on."""
    array = _contiguous(array)
    return CommHandle(get_group(group).require_member().Isend(array, dest=dest, tag=tag), None)


def irecv(shape, dtype, src, group=None, tag=0, out=None):
    """Non-blocking receive; `wait()` returns the array."""
    buf = np.empty(shape, dtype) if out is None else out
    return CommHandle(get_group(group).require_member().Irecv(buf, source=src, tag=tag), buf)


def all_gather_object(obj, group=None):
    """Every rank's picklable `obj`, as a list in group-rank order."""
    g = get_group(group)
    if g.size == 1:
        return [obj]
    return g.require_member().allgather(obj)


def broadcast_object(obj, group=None, root=0):
    g = get_group(group)
    if g.size == 1:
        return obj
    return g.require_member().bcast(obj, root=root)
