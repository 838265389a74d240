"""Timing shared by the peer scripts (they run in the peer interpreter, without mstrain)."""
import statistics
import time


def median_seconds(call, repeats, warmup):
    """Median wall time of `call()` over `repeats` runs after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
