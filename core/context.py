"""The execution context, as MindSpore's `set_context`: which mode runs Cells, and how graphs compile.

    >>> import mstrain as ms
    >>> ms.set_context(mode=ms.GRAPH_MODE)      # Cells run as compiled graphs
    >>> ms.get_context("mode") == ms.GRAPH_MODE
    True
    >>> ms.set_context(mode=ms.PYNATIVE_MODE)   # back to op-by-op (the default)

Keys: `mode` (GRAPH_MODE=0 or PYNATIVE_MODE=1), `enable_graph_kernel` (fuse elementwise and
reduction chains into generated C++ kernels; the environment variable MSTRAIN_DISABLE_FUSION=1
turns fusion off whatever this says), `device_target` ('CPU'), `device_id` (0), `save_graphs`
(write each graph's IR before and after every pass, as MSTRAIN_DUMP_IR does) with
`save_graphs_path`.
"""
from .context_state import _DEFAULTS, GRAPH_MODE, PYNATIVE_MODE, STATE, check_key, get_context  # noqa: F401


class ParallelMode:
    """The values of `set_auto_parallel_context(parallel_mode=...)` (MindSpore's `context.ParallelMode`)."""
    STAND_ALONE = "stand_alone"
    DATA_PARALLEL = "data_parallel"
    SEMI_AUTO_PARALLEL = "semi_auto_parallel"
    AUTO_PARALLEL = "auto_parallel"
    HYBRID_PARALLEL = "hybrid_parallel"
    MODE_LIST = [STAND_ALONE, DATA_PARALLEL, SEMI_AUTO_PARALLEL, AUTO_PARALLEL, HYBRID_PARALLEL]


# MindSpore code calls the parallel context through `context` too (`from mindspore import context`).
def set_auto_parallel_context(**kwargs):
    """`mstrain.parallel.set_auto_parallel_context`, reachable as `context.set_auto_parallel_context`."""
    from .parallel import set_auto_parallel_context as set_parallel
    return set_parallel(**kwargs)


def get_auto_parallel_context(key):
    from .parallel import get_auto_parallel_context as get_parallel
    return get_parallel(key)


def reset_auto_parallel_context():
    from .parallel import reset_auto_parallel_context as reset_parallel
    return reset_parallel()


def set_context(**kwargs):
    """Set context keys (see the module docstring); an unknown key or bad value raises ConfigError."""
    for key, value in kwargs.items():
        check_key(key, value)
    STATE.values.update(kwargs)
    if "mode" in kwargs:
        from .jit import run_cell  # the graph runner Cells use in GRAPH_MODE
        STATE.cell_runner = run_cell if kwargs["mode"] == GRAPH_MODE else None


def reset_context():
    """Every key back to its default (PYNATIVE_MODE)."""
    STATE.values = dict(_DEFAULTS)
    STATE.cell_runner = None
