"""The "mstrain" logger: rank-aware, configured once, level from MSTRAIN_LOG_LEVEL.

Under `mpiexec -n N` every record carries a `[rank r/N]` prefix, and `is_main_process()` lets
code print summaries on rank 0 only. Rank and world size come from the launcher's environment
(MPICH/Hydra `PMI_RANK`, Open MPI `OMPI_COMM_WORLD_RANK`, PMIx `PMIX_RANK`), so this works before
MPI is initialised and never imports mpi4py.

>>> from mstrain.log import get_logger
>>> get_logger("train").name
'mstrain.train'
"""
import logging
import os
import sys

__all__ = ["get_logger", "world_rank", "world_size", "is_main_process", "LOGGER_NAME"]

LOGGER_NAME = "mstrain"
_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def _first_int(names, default):
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return default


def world_rank():
    """This process's rank in the launcher's world (0 without a launcher)."""
    return _first_int(_RANK_VARS, 0)


def world_size():
    """Number of processes the launcher started (1 without a launcher)."""
    return _first_int(_SIZE_VARS, 1)


def is_main_process():
    """True on rank 0: the process that prints summaries and writes shared outputs."""
    return world_rank() == 0


class _RankFormatter(logging.Formatter):
    def format(self, record):
        message = super().format(record)
        size = world_size()
        return f"[rank {world_rank()}/{size}] {message}" if size > 1 else message


def _level_from_env():
    name = os.environ.get("MSTRAIN_LOG_LEVEL", "INFO").strip().upper()
    level = logging.getLevelName(name)
    return level if isinstance(level, int) else logging.INFO


def _configure(root):
    if getattr(root, "_mstrain_configured", False):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_RankFormatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(_level_from_env())
    root.propagate = False
    root._mstrain_configured = True


def get_logger(name=None):
    """The "mstrain" logger or its child "mstrain.<name>"; configures the root once (stderr)."""
    root = logging.getLogger(LOGGER_NAME)
    _configure(root)
    return root if not name else root.getChild(name)
