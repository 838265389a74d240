"""Communication over MPI: ranks and groups, differentiable collectives, Megatron region pairs.

    from mstrain.communication import init, get_rank, get_group_size
    init()                      # rank 0 of 1 in a plain process; rank r of N under mpiexec -n N
    y = all_reduce(x)           # differentiable; the gradient is an all-reduce too
"""
from .management import (  # noqa: F401
    WORLD_COMM_GROUP, Group, abort, barrier, create_group, destroy_group, get_group, get_group_rank_from_world_rank,
    get_group_size, get_local_rank, get_rank, get_world_rank_from_group_rank, init, is_initialized,
)
from .transport import (  # noqa: F401
    CommHandle, ReduceOp, all_gather_array, all_gather_object, all_reduce_array, all_to_all_array,
    all_to_all_v_array,
    broadcast_array, broadcast_object, iall_gather, iall_reduce, iall_to_all, irecv, ireduce_scatter, isend,
    recv_array, reduce_scatter_array, send_array,
)
from .collectives import (  # noqa: F401
    AllGather, AllReduce, AlltoAll, Broadcast, Receive, ReduceScatter, Send, all_gather, all_reduce, all_to_all,
    broadcast, receive, reduce, reduce_scatter, send,
)
from .regions import copy_to_region, gather_from_region, reduce_from_region, scatter_to_region  # noqa: F401
from .groups import ParallelGroups  # noqa: F401


class GlobalComm:
    """MindSpore's `GlobalComm.WORLD_COMM_GROUP`."""
    WORLD_COMM_GROUP = WORLD_COMM_GROUP


HCCL_WORLD_COMM_GROUP = NCCL_WORLD_COMM_GROUP = WORLD_COMM_GROUP

__all__ = [
    "init", "get_rank", "get_group_size", "get_local_rank", "create_group", "destroy_group", "get_group",
    "get_world_rank_from_group_rank", "get_group_rank_from_world_rank", "barrier", "abort", "is_initialized",
    "Group", "ParallelGroups", "GlobalComm", "WORLD_COMM_GROUP", "ReduceOp", "CommHandle",
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send", "receive",
    "AllReduce", "AllGather", "ReduceScatter", "AlltoAll", "Broadcast", "Send", "Receive",
    "iall_reduce", "iall_gather", "ireduce_scatter", "iall_to_all", "isend", "irecv",
    "copy_to_region", "reduce_from_region", "scatter_to_region", "gather_from_region",
]

from . import graph_kernels as _graph_kernels  # noqa: E402

_graph_kernels.register()  # compiled steps run the collectives as C kernels on planned buffers
