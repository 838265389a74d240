"""Point-to-point graph ops of a compiled pipeline step (see pipeline.PipelineCell).

    pipeline_isend(x)            start sending x to a neighbouring stage; returns a 0-d token
    pipeline_recv(token)         receive an array of a known shape and dtype (blocking)
    pipeline_wait(state, *tok)   wait for the sends whose tokens it takes (an in-place op on a
                                 small state tensor, so dead-code elimination keeps the sends)

Sends never block and receives do, in the 1F1B order, so no two stages can wait on each other,
exactly as in the eager schedule. In a compiled plan the kernels call MPI_Isend / MPI_Recv /
MPI_Wait from C on preallocated buffers (a send copies its value aside first: the plan may reuse
the source buffer while the send is in flight); otherwise mpi4py's buffer API does the same.
"""
import contextlib
import ctypes

import numpy as np

from .. import autograd as _autograd
from ..communication import graph_kernels as _gk
from ..ops.primitive import apply, defop, register_rule

FORWARD_TAG, BACKWARD_TAG = 0, 1  # message tags of activations and of their gradients


@contextlib.contextmanager
def without_ready_hooks():
    """Micro-batch gradients are partial: data-parallel reducers must not take them as final."""
    hooks = list(_autograd.grad_ready_hooks)
    _autograd.grad_ready_hooks.clear()
    try:
        yield
    finally:
        _autograd.grad_ready_hooks.extend(hooks)


_PENDING = {}  # id(group) -> [(request, buffer)] of sends started eagerly (while tracing)


@defop("pipeline_isend", attrs=("dest", "group", "tag"), stateful=True, differentiable=False)
def _isend(x, dest, group, tag=0):
    buffer = np.array(x, copy=True, order="C")
    request = group.require_member().Isend(buffer, dest=dest, tag=tag)
    _PENDING.setdefault(id(group), []).append((request, buffer))
    return np.zeros((), np.float32)


@defop("pipeline_recv", attrs=("src", "shape", "dtype", "group", "tag"), stateful=True, differentiable=False)
def _recv(token, src, shape, dtype, group, tag=0):
    out = np.empty(shape, dtype)
    group.require_member().Recv(out, source=src, tag=tag)
    return out


@defop("pipeline_wait", attrs=("group",), stateful=True, differentiable=False, mutates=(0,))
def _wait(state, *tokens, group):
    for request, _ in _PENDING.pop(id(group), []):
        request.Wait()
    return state


def isend(x, dest, group, tag):
    return apply(_isend, x, dest=dest, group=group, tag=tag)


def recv(src, shape, dtype, group, tag):
    return apply(_recv, np.zeros((), np.float32), src=src, shape=tuple(shape), dtype=np.dtype(dtype),
                 group=group, tag=tag)


def wait(state, tokens, group):
    return apply(_wait, state, *tokens, group=group)


# ---------------------------------------------------------------------------------------------
# Kernels of a compiled plan
# ---------------------------------------------------------------------------------------------

_SLOTS = {}  # address of a send's token buffer -> its _SendSlot (bound just before the wait)


class _SendSlot:
    """Where one send's request lives: a C request slot (native) or an mpi4py Request."""

    def __init__(self, native):
        self.native = native
        self.c_slot = np.zeros(16, np.uint8)  # room for an MPI_Request of any implementation
        self.request = None


def _isend_kernel(node, ins, outs):
    a = node.attrs
    x, token = np.asarray(ins[0]), outs[0]
    comm = a["group"].require_member()
    staging = np.empty(x.shape, x.dtype)
    slot = _SendSlot(_gk._native_ready(x.dtype, comm))
    _SLOTS[token.ctypes.data] = slot

    def run():
        np.copyto(staging, x)
        slot.request = comm.Isend(staging, dest=a["dest"], tag=a["tag"])
    if not slot.native:
        return _gk.CollectiveKernel(run)
    steps = []
    src = _gk._contiguous(x, steps)
    steps.append(("ms_isend", (staging, src, slot.c_slot),
                  [x.nbytes, x.size, _gk._handle(_gk._datatype(x.dtype)), a["dest"], a["tag"], _gk._handle(comm)]))
    return _gk.CollectiveKernel(run, steps)


def _recv_kernel(node, ins, outs):
    a = node.attrs
    out = outs[0]
    comm = a["group"].require_member()
    status = np.zeros(64, np.uint8)

    def run():
        comm.Recv(out, source=a["src"], tag=a["tag"])
    if not (_gk._native_ready(out.dtype, comm) and out.flags.c_contiguous):
        return _gk.CollectiveKernel(run)
    return _gk.CollectiveKernel(run, [("ms_recv", (out, status), [out.size, _gk._handle(_gk._datatype(out.dtype)),
                                                                  a["src"], a["tag"], _gk._handle(comm)])])


def _wait_kernel(node, ins, outs):
    slots = [_SLOTS.pop(np.asarray(t).ctypes.data) for t in ins[1:]]
    status = np.zeros(64, np.uint8)
    native = [s for s in slots if s.native]
    library = _gk.native_library()

    def wait_native():
        if native:
            pointers = (ctypes.c_void_p * (1 + len(native)))(status.ctypes.data, *[s.c_slot.ctypes.data for s in native])
            values = (ctypes.c_int64 * 1)(len(native))
            library.ms_wait(pointers, values)

    def run():
        wait_native()
        for s in slots:
            if not s.native and s.request is not None:
                s.request.Wait()
                s.request = None
    if len(native) == len(slots):
        return _gk.CollectiveKernel(run, [("ms_wait", (status, *[s.c_slot for s in slots]), [len(slots)])])
    return _gk.CollectiveKernel(run)


def _register():
    register_rule("host_kernel", "pipeline_isend")(_isend_kernel)
    register_rule("host_kernel", "pipeline_recv")(_recv_kernel)
    register_rule("host_kernel", "pipeline_wait")(_wait_kernel)


_register()
