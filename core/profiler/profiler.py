"""`Profiler`: MindSpore's performance profiler for eager, graph-sink and loop-sink training.

    profiler = ms.Profiler(output_path="./prof")
    model.train(1, data, dataset_sink_mode=True)
    profiler.analyse()          # writes ./prof/profiler/... and returns the summary

Files (under `<output_path>/profiler/`):
    rank<r>/op_statistic.json   per op and per op type: count, total, mean, share of the step time
    rank<r>/step_trace.json     every step's breakdown: data_wait, forward, backward, optimizer,
                                communication, host_overhead, total (seconds)
    rank<r>/timeline.json       Chrome trace events (chrome://tracing, ui.perfetto.dev)
    rank<r>/pipeline.json       the input pipeline: per dataset operation rows, own time, rows/s,
                                worker utilisation, and the bottleneck in one sentence
    timeline.json, summary.json all ranks merged (written by rank 0; one track group per rank)

Eager op calls are timed at the single dispatch point; compiled plans report per-kernel times
accumulated by the C loop itself (fused kernels list the ops inside them); dataset worker tasks
appear as slices on their own threads' tracks.
"""
import collections
import json
import os
import time

from ..fileio import write_json_atomically
from ..log import world_rank, world_size
from ..ops.primitive import dispatch
from . import phases
from .pipeline import pipeline_report
from .recorder import PHASES, Recorder

__all__ = ["Profiler", "active_profiler"]

_EVENT_BYTES = 130  # a timeline slice as JSON, about


def active_profiler():
    """The Recorder of the running Profiler, or None."""
    return dispatch.profiler


def _rank_and_size():
    from ..communication import management
    if management.is_initialized():
        return management.get_rank(), management.get_group_size()
    return world_rank(), world_size()


class Profiler:
    """Profile everything the process runs between `start()` (the constructor, by default) and
    `stop()` / `analyse()`.

    output_path: directory that receives `profiler/` (see the module docstring).
    start_profile: start at construction (False: call `start()` yourself).
    record_shapes: tell op calls apart by their input shapes ('forward/matmul[64x784,784x256]').
    data_process: profile the input pipeline too (pipeline.json), as MindSpore's flag.
    timeline_limit: MB of timeline events to keep (MindSpore's default 500); later slices are
        dropped (the op table and steps still count them).
    """

    def __init__(self, output_path="./data", start_profile=True, record_shapes=True, data_process=True,
                 timeline_limit=500):
        if not isinstance(output_path, (str, os.PathLike)):
            raise TypeError(f"Profiler: output_path must be a path, got {type(output_path).__name__}")
        if isinstance(timeline_limit, bool) or not isinstance(timeline_limit, (int, float)) or timeline_limit <= 0:
            raise ValueError(f"Profiler: timeline_limit must be a positive number of MB, got {timeline_limit!r}")
        self.output_path = os.fspath(output_path)
        self.record_shapes = bool(record_shapes)
        self.data_process = bool(data_process)
        self.max_events = int(timeline_limit * 1e6 / _EVENT_BYTES)
        self._recorder = None
        self._result = None
        if start_profile:
            self.start()

    @property
    def profiler_dir(self):
        return os.path.join(self.output_path, "profiler")

    def start(self):
        if dispatch.profiler is not None:
            raise RuntimeError("Profiler.start: another Profiler is running; stop it first")
        rank, _ = _rank_and_size()
        self._recorder = Recorder(rank, self.record_shapes, self.max_events)
        phases.install(self._recorder, self.data_process)
        dispatch.profiler = self._recorder

    def stop(self):
        if self._recorder is not None and dispatch.profiler is self._recorder:
            dispatch.profiler = None
            phases.uninstall()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()
        return False

    def analyse(self):
        """Stop, write this rank's files and (on rank 0) the merged view; returns the summary dict."""
        self.stop()
        if self._recorder is None:
            raise RuntimeError("Profiler.analyse: the profiler was never started")
        recorder = self._recorder
        rank, size = _rank_and_size()
        rank_dir = os.path.join(self.profiler_dir, f"rank{rank}")
        os.makedirs(rank_dir, exist_ok=True)
        table = op_table(recorder)
        steps = step_trace(recorder)
        write_json_atomically(os.path.join(rank_dir, "op_statistic.json"), table)
        write_json_atomically(os.path.join(rank_dir, "step_trace.json"), steps)
        write_json_atomically(os.path.join(rank_dir, "timeline.json"), {"traceEvents": trace_events(recorder)})
        pipeline = pipeline_report(recorder)
        write_json_atomically(os.path.join(rank_dir, "pipeline.json"), pipeline)
        self._result = {"rank": rank, "ops": table, "steps": steps, "pipeline": pipeline}
        if size > 1:
            _barrier()
        if rank == 0:
            merge_ranks(self.profiler_dir)
        return self._result

    def op_analyse(self, op_name):
        """The op-table rows whose name or type contains `op_name` (after `analyse`)."""
        if self._result is None:
            raise RuntimeError("Profiler.op_analyse: call analyse() first")
        return [row for row in self._result["ops"]["ops"] if op_name in row["name"] or op_name == row["type"]]


def _barrier():
    from ..communication import management
    if management.is_initialized():
        management.barrier()


# ---- analysis ------------------------------------------------------------------------------------

def op_table(recorder):
    """Per op and per op type: count, total_s, mean_s, share (of the steps' time plus the op time
    outside steps, e.g. evaluation; of all op time when no step was recorded)."""
    rows = [{"name": name, "type": op_type, "count": count, "total_s": ns / 1e9, "ops_inside": []}
            for (name, op_type), (count, ns) in recorder.ops.items()]
    rows += [{"name": name, "type": op_type, "count": count, "total_s": seconds, "ops_inside": inside}
             for name, op_type, count, seconds, inside in recorder.kernels.values()]
    step_total = sum(s["total"] for s in recorder.steps)
    base = (step_total + recorder.outside_steps_ns / 1e9 if step_total else sum(r["total_s"] for r in rows)) or 1.0
    for row in rows:
        row["mean_s"] = row["total_s"] / max(row["count"], 1)
        row["share"] = row["total_s"] / base
    rows.sort(key=lambda r: -r["total_s"])
    by_type = collections.defaultdict(lambda: {"count": 0, "total_s": 0.0})
    for row in rows:
        entry = by_type[row["type"]]
        entry["count"] += row["count"]
        entry["total_s"] += row["total_s"]
    types = [{"type": t, **v, "mean_s": v["total_s"] / max(v["count"], 1), "share": v["total_s"] / base}
             for t, v in by_type.items()]
    types.sort(key=lambda r: -r["total_s"])
    return {"ops": rows, "op_types": types, "share_of": "run time" if step_total else "op time"}


def step_trace(recorder):
    steps = [dict(s, step=i + 1) for i, s in enumerate(recorder.steps)]
    mean = {}
    if steps:
        for key in (*PHASES, "total"):
            mean[key] = sum(s[key] for s in steps) / len(steps)
    return {"rank": recorder.rank, "phases": list(PHASES), "steps": steps, "mean": mean}


def trace_events(recorder):
    """Chrome trace events of one rank: pid = rank; tid 0 steps, 1 main thread, 2+ dataset workers."""
    pid = recorder.rank
    tids = {"steps": 0, recorder.main_thread: 1}
    names = {0: "steps", 1: "main thread (ops)"}
    for ident, name in sorted(recorder.threads.items(), key=lambda kv: kv[1]):
        if ident not in tids:
            tids[ident] = len(tids)
            names[tids[ident]] = f"dataset {name}"
    origin_us = recorder.wall_origin * 1e6
    events = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"rank {pid}"}},
              {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}}]
    events += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
               for tid, name in names.items()]
    for name, start, value, capacity in recorder.counters:
        events.append({"name": name, "ph": "C", "pid": pid, "ts": round(origin_us + (start - recorder.origin_ns) / 1e3, 3),
                       "args": {"batches": value, "capacity": capacity}})
    for name, category, thread, start, duration in recorder.events:
        events.append({"name": name, "cat": category, "ph": "X", "pid": pid, "tid": tids.get(thread, 1),
                       "ts": round(origin_us + (start - recorder.origin_ns) / 1e3, 3),
                       "dur": round(duration / 1e3, 3)})
    return events


def merge_ranks(profiler_dir):
    """Merge every rank<r>/ directory into timeline.json (all tracks) and summary.json."""
    ranks = sorted(int(d[4:]) for d in os.listdir(profiler_dir) if d.startswith("rank") and d[4:].isdigit())
    events, summary = [], {"ranks": ranks, "step_mean": {}, "op_types": {}}
    for rank in ranks:
        folder = os.path.join(profiler_dir, f"rank{rank}")
        with open(os.path.join(folder, "timeline.json")) as f:
            events += json.load(f)["traceEvents"]
        with open(os.path.join(folder, "step_trace.json")) as f:
            summary["step_mean"][str(rank)] = json.load(f)["mean"]
        with open(os.path.join(folder, "op_statistic.json")) as f:
            summary["op_types"][str(rank)] = json.load(f)["op_types"][:20]
    write_json_atomically(os.path.join(profiler_dir, "timeline.json"),
                          {"traceEvents": events, "displayTimeUnit": "ms"})
    summary["written"] = time.time()
    write_json_atomically(os.path.join(profiler_dir, "summary.json"), summary)
    return summary
