"""The world communicator, named groups and start-up/shutdown of a multi-process job.

`init()` imports mpi4py lazily: a plain `python script.py` is rank 0 of a world of 1 (MPI
singleton start-up, or an in-process stand-in when mpi4py is absent), and `mpiexec -n N` gives
N ranks. The only module state is `_world`: the world communicator and the table of groups made
by `create_group` (MindSpore addresses groups by name). Everything else takes a `Group` object.

A rank that raises aborts the whole job: `init()` installs an excepthook that prints
`[rank r/n] Error: message` and calls `MPI_Abort`, so the other ranks never wait forever in a
collective. A rank that exits otherwise (sys.exit) waits at most EXIT_WAIT_SECONDS for the others
to exit as well, then aborts the job; the CLI aborts at once after reporting a user error.
"""
import atexit
import os
import sys
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from ..log import world_size

WORLD_COMM_GROUP = "world"  # MindSpore's GlobalComm.WORLD_COMM_GROUP ('hccl_world_group' there)
# How long an exiting rank waits for the others before aborting the job (env MSTRAIN_EXIT_WAIT).
EXIT_WAIT_SECONDS = float(os.environ.get("MSTRAIN_EXIT_WAIT", "30"))


@dataclass(frozen=True)
class Group:
    """A set of world ranks that communicate together; `ranks[i]` is the world rank of group rank i.

    Frozen and hashable, so it can be an op attribute. `comm` is the MPI communicator, or None on
    a process outside the group (collectives on it then raise, naming the group).
    """
    name: str
    ranks: tuple
    world_rank: int = field(default=0, compare=False)
    comm: object = field(default=None, compare=False, repr=False)

    @property
    def size(self):
        return len(self.ranks)

    @property
    def rank(self):
        """This process's rank inside the group (-1 when it is not a member)."""
        try:
            return self.ranks.index(self.world_rank)
        except ValueError:
            return -1

    def __contains__(self, world_rank):
        return world_rank in self.ranks

    def require_member(self):
        if self.comm is None:
            raise RuntimeError(f"rank {self.world_rank} is not a member of group {self.name!r} "
                               f"(ranks {list(self.ranks)})")
        return self.comm


class _World:
    """The world communicator and the named groups (the single piece of module state)."""
    comm = None
    groups = {}
    split_cache = {}


_world = _World()


def init(backend_name=None):
    """Start the communication layer (idempotent). `backend_name` is accepted for MindSpore
    compatibility ('hccl', 'nccl', 'mpi'); the transport is always MPI."""
    if _world.comm is not None:
        return
    comm = _open_world()
    _world.comm = comm
    size, rank = comm.Get_size(), comm.Get_rank()
    _world.groups = {WORLD_COMM_GROUP: Group(WORLD_COMM_GROUP, tuple(range(size)), rank, comm)}
    if size > 1:
        _install_abort_hook(rank, size)
        atexit.register(_exit_barrier, comm.Dup(), rank, size)  # its own communicator: never matches user collectives


def _open_world():
    try:
        from mpi4py import MPI
    except ImportError:
        declared = world_size()
        if declared > 1:
            raise RuntimeError(f"launched as one of {declared} ranks but mpi4py is not installed; "
                               "install mpi4py (pip install mpi4py) to run in parallel") from None
        return _SingleProcessComm()
    return MPI.COMM_WORLD


def is_initialized():
    return _world.comm is not None


def world_comm():
    """The world communicator (initialising on first use)."""
    if _world.comm is None:
        init()
    return _world.comm


def get_group(group=None):
    """Resolve a group name or Group to a Group (None and 'world' give the world)."""
    if isinstance(group, Group):
        return group
    world_comm()
    name = WORLD_COMM_GROUP if group in (None, "hccl_world_group", "nccl_world_group") else group
    try:
        return _world.groups[name]
    except KeyError:
        known = ", ".join(sorted(_world.groups))
        raise KeyError(f"unknown communication group {name!r}; known: {known}") from None


def get_rank(group=None):
    """This process's rank in `group` (the world by default)."""
    g = get_group(group)
    return g.rank


def get_group_size(group=None):
    """Number of ranks in `group` (the world by default)."""
    return get_group(group).size


def get_local_rank(group=None):
    """Rank among the processes on this host (MPI's shared-memory split)."""
    comm = world_comm()
    if comm.Get_size() == 1:
        return 0
    from mpi4py import MPI
    return comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()


def get_world_rank_from_group_rank(group, group_rank):
    """World rank of rank `group_rank` of `group`."""
    g = get_group(group)
    if not 0 <= group_rank < g.size:
        raise ValueError(f"group {g.name!r} has {g.size} ranks; no group rank {group_rank}")
    return g.ranks[group_rank]


def get_group_rank_from_world_rank(world_rank, group):
    """Rank inside `group` of world rank `world_rank`."""
    g = get_group(group)
    if world_rank not in g.ranks:
        raise ValueError(f"world rank {world_rank} is not in group {g.name!r} (ranks {list(g.ranks)})")
    return g.ranks.index(world_rank)


def create_group(name, ranks):
    """Create the named group of world `ranks` (in that order) and return it.

    Only the member ranks need to call it (MPI_Comm_create_group); on other ranks the call just
    records the group without a communicator.
    """
    comm = world_comm()
    ranks = tuple(int(r) for r in ranks)
    if name in _world.groups:
        raise ValueError(f"communication group {name!r} already exists")
    size = comm.Get_size()
    if not ranks or len(set(ranks)) != len(ranks) or min(ranks) < 0 or max(ranks) >= size:
        raise ValueError(f"create_group({name!r}): ranks {list(ranks)} must be distinct world ranks "
                         f"in [0, {size})")
    rank = comm.Get_rank()
    sub = None
    if rank in ranks:
        sub = comm if ranks == tuple(range(size)) else comm.Create_group(comm.Get_group().Incl(list(ranks)))
    group = Group(name, ranks, rank, sub)
    _world.groups[name] = group
    return group


def destroy_group(name):
    """Free a group made by create_group."""
    group = _world.groups.pop(name, None)
    if group is None or name == WORLD_COMM_GROUP:
        raise ValueError(f"no user group {name!r} to destroy")
    if group.comm is not None and group.comm is not _world.comm:
        group.comm.Free()


def split_groups(key, color_of_rank, parent=None):
    """Partition `parent` (a Group; default the world) into groups: collective over the parent's
    ranks only, cached by `key`.

    `color_of_rank(world_rank) -> (color, name)`; ranks with the same color form one group,
    ordered as in the parent. Returns this rank's Group.
    """
    cached = _world.split_cache.get(key)
    if cached is not None:
        return cached
    parent = get_group(parent)
    comm = parent.require_member()
    rank = parent.world_rank
    color, name = color_of_rank(rank)
    ranks = tuple(r for r in parent.ranks if color_of_rank(r)[0] == color)
    sub = comm if len(ranks) == parent.size else comm.Split(color, parent.rank)  # every rank takes the same branch
    group = Group(name, ranks, rank, sub)
    _world.split_cache[key] = group
    return group


def barrier(group=None):
    get_group(group).require_member().Barrier()


def abort(message, code=1):
    """Print `[rank r/n] message` and end every rank of the job (MPI_Abort when n > 1)."""
    comm = world_comm()
    size = comm.Get_size()
    sys.stderr.write(f"[rank {comm.Get_rank()}/{size}] {message}\n")
    sys.stderr.flush()
    if size > 1:
        _abort(comm, code)
    raise SystemExit(code)


def abort_job_if_parallel(code):
    """Called on a rank that is about to exit with an error it already reported (the CLI's user
    errors): end the other ranks too, instead of leaving them in a collective."""
    comm = _world.comm
    if comm is None or comm.Get_size() == 1:
        return
    sys.stderr.write(f"[rank {comm.Get_rank()}/{comm.Get_size()}] exiting with code {code}; aborting all ranks\n")
    _abort(comm, code)


def _exit_barrier(comm, rank, size):
    """At interpreter exit, wait (bounded) for the other ranks to exit too; a rank that leaves
    while the others are stuck in a collective (a plain sys.exit) then aborts the job."""
    request = comm.Ibarrier()
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    while not request.Test():
        if time.monotonic() > deadline:
            sys.stderr.write(f"[rank {rank}/{size}] exited while other ranks kept running for "
                             f"{EXIT_WAIT_SECONDS:.0f} s; aborting all ranks\n")
            _abort(_world.comm, 1)
        time.sleep(0.005)


def _abort(comm, code):
    """MPI_Abort after giving the launcher a moment to forward what this rank printed."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(0.5)
    comm.Abort(code)


def _install_abort_hook(rank, size):
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        from ..errors import UserError
        if issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
            previous(exc_type, exc, tb)
        elif not issubclass(exc_type, UserError):
            traceback.print_exception(exc_type, exc, tb)
        sys.stderr.write(f"[rank {rank}/{size}] {exc_type.__name__}: {exc}; aborting all ranks\n")
        _abort(_world.comm, 1)

    sys.excepthook = hook


class _SingleProcessComm:
    """Stand-in for MPI.COMM_WORLD of size 1 when mpi4py is not installed: every collective is a copy."""

    def Get_size(self):
        return 1

    def Get_rank(self):
        return 0

    def Barrier(self):
        return None

    def Abort(self, code=1):
        os._exit(code)

    def Split(self, color=0, key=0):
        return self

    def _copy(self, send, recv):
        send = send[0] if isinstance(send, (list, tuple)) else send
        recv = recv[0] if isinstance(recv, (list, tuple)) else recv
        if recv is not None and send is not None and not isinstance(send, int):
            np.copyto(np.asarray(recv).reshape(-1), np.asarray(send).reshape(-1))
        return _DoneRequest()

    def Allreduce(self, send, recv, op=None):
        self._copy(send, recv)

    Allgather = Reduce_scatter_block = Alltoall = Allreduce

    def Bcast(self, buf, root=0):
        return None

    def Iallreduce(self, send, recv, op=None):
        return self._copy(send, recv)

    Iallgather = Ireduce_scatter_block = Ialltoall = Iallreduce

    def allgather(self, obj):
        return [obj]

    def bcast(self, obj, root=0):
        return obj


class _DoneRequest:
    def Wait(self):
        return None

    def Test(self):
        return True
