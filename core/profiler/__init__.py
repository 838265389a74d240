"""Performance profiling (MindSpore's `Profiler`): see `profiler.py` for the files it writes."""
from .kernels import kernel_label, kernel_times
from .profiler import Profiler, active_profiler, merge_ranks, op_table, step_trace, trace_events

__all__ = ["Profiler", "active_profiler", "kernel_label", "kernel_times", "merge_ranks", "op_table", "step_trace",
           "trace_events"]
