"""Phase markers installed only while a profiler runs (nothing is wrapped otherwise).

`install(recorder)` wraps `autograd.backward` ('backward'), `Optimizer.__call__` ('optimizer') and
`DistributedGradReducer.__call__` ('communication': the wait for the asynchronous all-reduce,
beyond the ops it runs) so that the recorder attributes each op call to its phase; `uninstall`
puts the originals back. The dataset nodes' row generators are timed too (`pipeline.py`).
"""
import time

__all__ = ["install", "uninstall"]

_saved = []


def _phase_wrapper(recorder, phase, original, timed=False):
    def wrapped(*args, **kwargs):
        previous = recorder.enter(phase)
        before = sum(recorder.phase_ns.values())
        start = time.perf_counter_ns()
        try:
            return original(*args, **kwargs)
        finally:
            recorder.leave(previous)
            if timed:  # the part of the call no op covers (waiting on other ranks)
                covered = sum(recorder.phase_ns.values()) - before
                recorder.add_phase_time(phase, max(0, time.perf_counter_ns() - start - covered))
    wrapped.__wrapped__ = original
    return wrapped


def install(recorder, data_process=True):
    from .. import autograd
    from ..nn.optim.optimizer import Optimizer
    from ..parallel.grad_reducer import DistributedGradReducer
    from ..nn.cell import Cell
    targets = [(autograd, "backward", "backward", False),
               (Optimizer, "__call__", "optimizer", False),
               (DistributedGradReducer, "__call__", "communication", True)]
    from . import pipeline
    if data_process:
        pipeline.install(recorder)
    for owner, name, phase, timed in targets:
        had_own = name in vars(owner)
        original = getattr(owner, name) if had_own or owner is not Optimizer else Cell.__call__
        _saved.append((owner, name, vars(owner).get(name), had_own))
        setattr(owner, name, _phase_wrapper(recorder, phase, original, timed))


def uninstall():
    from . import pipeline
    pipeline.uninstall()
    while _saved:
        owner, name, original, had_own = _saved.pop()
        if had_own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)
