"""Order-preserving parallel map with a bounded window, on threads or forked processes."""
import collections
import itertools
import multiprocessing
from concurrent.futures import ThreadPoolExecutor

_WINDOW_PER_WORKER = 4
_FORKED_TASKS = {}  # task id -> callable; forked children inherit it, so lambdas need no pickling
_task_ids = itertools.count()


def ordered_map(fn, items, num_workers=1, processes=False):
    """Yield fn(item) for each item, in input order, computing up to a few items per worker ahead.

    processes=True forks worker processes (Linux 'fork' start method) that inherit `fn`, so `fn`
    need not be picklable; items and results must be.
    """
    from ..ops.primitive import dispatch
    if dispatch.profiler is not None and not processes:  # each task a slice on its thread's track
        fn = dispatch.profiler.worker_task(fn, getattr(fn, "__qualname__", "task"))
    if num_workers <= 1:
        return map(fn, items)
    if processes:
        return _map_on_processes(fn, items, num_workers)
    return _map_on_threads(fn, items, num_workers)


def _windowed(submit, wait, items, window):
    pending = collections.deque()
    for item in items:
        pending.append(submit(item))
        if len(pending) >= window:
            yield wait(pending.popleft())
    while pending:
        yield wait(pending.popleft())


def _map_on_threads(fn, items, num_workers):
    executor = ThreadPoolExecutor(num_workers, thread_name_prefix="dataset-worker")
    try:
        yield from _windowed(lambda item: executor.submit(fn, item), lambda fut: fut.result(),
                             items, num_workers * _WINDOW_PER_WORKER)
    finally:
        executor.shutdown(wait=False, cancel_futures=True)


def _run_forked_task(task_id, item):
    return _FORKED_TASKS[task_id](item)


def _map_on_processes(fn, items, num_workers):
    task_id = next(_task_ids)
    _FORKED_TASKS[task_id] = fn
    pool = multiprocessing.get_context("fork").Pool(num_workers)
    try:
        yield from _windowed(lambda item: pool.apply_async(_run_forked_task, (task_id, item)),
                             lambda res: res.get(), items, num_workers * _WINDOW_PER_WORKER)
    finally:
        pool.terminate()
        _FORKED_TASKS.pop(task_id, None)
