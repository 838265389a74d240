"""What a running Profiler records: op calls, phases, steps, dataset-worker tasks, compiled kernels.

The recorder is reached through `mstrain.ops.primitive.dispatch.profiler` (None when no profiler
runs, so the dispatch point pays one attribute read). Hooks that call it:

- `primitive._run` -> `run_op`: every eager op call, timed and attributed to the current phase;
- the train loop -> `timed_batches`: data wait per batch and the step boundaries;
- the sink runner -> `kernel_seconds_for` / `add_compiled_run`: per-kernel times of compiled plans
  (accumulated by the C loop itself, or by the Python executor when there is no C runtime);
- `dataset._workers.ordered_map` -> `worker_task`: one timeline slice per dataset task, per thread.

Phases come from wrappers installed only while profiling (see `phases.py`): 'backward' inside
`autograd.backward`, 'optimizer' inside an Optimizer call, 'communication' inside the gradient
reducer's wait and for collective ops; everything else on the main thread is 'forward'.
"""
import collections
import threading
import time

__all__ = ["Recorder", "COMMUNICATION_OPS", "PHASES"]

COMMUNICATION_OPS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
                               "reduce", "send", "receive", "copy_to_region", "reduce_from_region"})
PHASES = ("data_wait", "forward", "backward", "optimizer", "communication", "host_overhead")
_MAX_EVENTS = 300_000


def _shape_signature(inputs):
    shapes = []
    for x in inputs:
        shape = getattr(x, "shape", None)
        shapes.append("x".join(str(d) for d in shape) if shape is not None else "s")
    return ",".join(shapes)


class Recorder:
    """Accumulates one rank's profile; `Profiler` owns it (see the module docstring)."""

    def __init__(self, rank=0, record_shapes=True, max_events=_MAX_EVENTS):
        self.rank = rank
        self.record_shapes = record_shapes
        self.max_events = max_events
        self.origin_ns = time.perf_counter_ns()
        self.wall_origin = time.time()
        self.main_thread = threading.get_ident()
        self.ops = {}                       # (op name, op type) -> [count, total_ns]
        self.phase = "forward"
        self.phase_ns = collections.Counter()   # phase -> op time inside the current step
        self.steps = []                     # per-step dicts of phase -> seconds, plus 'total'
        self.step_start = None
        self.pending_steps = []             # eager steps of the current round trip
        self.outside_steps_ns = 0           # op time outside training steps (evaluation)
        self.events = []                    # (name, category, thread id, start_ns, duration_ns)
        self.threads = {}                   # thread id -> track name
        self.kernels = {}                   # (plan id, index) -> [kernel name, op type, calls, seconds]
        self.dropped_events = 0
        self.dataset = {}                   # id(dataset node) -> [label, rows, inclusive_ns, child ids]
        self.counters = []                  # (name, time_ns, value, capacity): queue fill levels
        self._lock = threading.Lock()

    # ---- eager ops ---------------------------------------------------------------------------------
    def run_op(self, prim, inputs, attrs, run):
        start = time.perf_counter_ns()
        result = run(prim, inputs, attrs)
        end = time.perf_counter_ns()
        if threading.get_ident() != self.main_thread:
            return result  # a dataset worker's op: its task slice already covers it
        name = prim.name
        phase = "communication" if name in COMMUNICATION_OPS else self.phase
        key = (f"{phase}/{name}[{_shape_signature(inputs)}]" if self.record_shapes else f"{phase}/{name}", name)
        entry = self.ops.get(key)
        if entry is None:
            entry = self.ops[key] = [0, 0]
        entry[0] += 1
        entry[1] += end - start
        self.phase_ns[phase] += end - start
        if self.step_start is None:
            self.outside_steps_ns += end - start  # evaluation, or work between round trips
        self._event(name, phase, self.main_thread, start, end - start)
        return result

    def _event(self, name, category, thread, start, duration):
        if len(self.events) < self.max_events:
            self.events.append((name, category, thread, start, duration))
        else:
            self.dropped_events += 1

    # ---- phases and steps ----------------------------------------------------------------------------
    def enter(self, phase):
        """Make `phase` current; returns the previous phase (give it back to `leave`)."""
        previous, self.phase = self.phase, phase
        return previous

    def leave(self, previous):
        self.phase = previous

    def add_phase_time(self, phase, seconds_ns):
        """Time spent in `phase` that no op call covers (waiting on an asynchronous all-reduce)."""
        self.phase_ns[phase] += seconds_ns

    def timed_batches(self, batches, feed=None):
        """Yield `batches`, timing each fetch as data wait; each batch request ends the previous step.
        With the sink queue as `feed`, its fill level is sampled at each fetch (a timeline counter)."""
        iterator = iter(batches)
        sink_queue = getattr(feed, "_queue", None)
        while True:
            start = time.perf_counter_ns()
            level = sink_queue.qsize() if sink_queue is not None else None
            self._close_pending(start)
            try:
                batch = next(iterator)
            except StopIteration:
                return
            end = time.perf_counter_ns()
            if level is not None:
                self.counters.append(("sink queue fill", start, level, sink_queue.maxsize))
            self._event("data_wait", "data_wait", self.main_thread, start, end - start)
            self.round_trip_wait_ns += end - start
            self.step_start = start
            self.phase_ns = collections.Counter(data_wait=end - start)
            yield batch

    round_trip_wait_ns = 0
    compiled_in_round_trip = False

    def _close_pending(self, now):
        if self.step_start is not None:
            self.pending_steps.append((self.step_start, now - self.step_start, self.phase_ns))
            self.step_start = None

    def finish_round_trip(self):
        """End of a round trip: its eager steps become step records, unless a compiled run
        reported the steps itself (`add_compiled_run`)."""
        self._close_pending(time.perf_counter_ns())
        if not self.compiled_in_round_trip:
            for start, total, phase_ns in self.pending_steps:
                self._add_step(start, total, phase_ns)
        self.pending_steps = []
        self.round_trip_wait_ns = 0
        self.compiled_in_round_trip = False
        self.phase_ns = collections.Counter()

    def _add_step(self, start, total_ns, phase_ns):
        step = {p: phase_ns.get(p, 0) / 1e9 for p in PHASES if p != "host_overhead"}
        step["total"] = total_ns / 1e9
        step["host_overhead"] = max(0.0, step["total"] - sum(step[p] for p in PHASES if p in step))
        step["start"] = (start - self.origin_ns) / 1e9
        self.steps.append(step)
        self._event(f"step {len(self.steps)}", "step", "steps", start, total_ns)

    # ---- compiled plans ----------------------------------------------------------------------------
    def kernel_seconds_for(self, executable):
        """The array the C loop adds each kernel's seconds into (one entry per plan kernel)."""
        import numpy as np
        return np.zeros(len(executable.plan), np.float64)

    def add_compiled_run(self, executable, kernel_seconds, step_seconds, start_ns):
        """Fold one compiled run (len(step_seconds) steps) into the op table, steps and timeline.

        The batches of a sink are all fetched before its C loop starts, so their data wait is
        spread evenly over the sink's steps; each step's compute time is split over phases in
        proportion to the kernels' accumulated times."""
        import numpy as np
        steps = len(step_seconds)
        for index, (node, seconds) in enumerate(zip(executable.plan_nodes, kernel_seconds)):
            key = (id(executable), index)
            entry = self.kernels.get(key)
            if entry is None:
                entry = self.kernels[key] = [_kernel_name(index, node), _kernel_type(node), 0, 0.0,
                                             _fused_ops(node)]
            entry[2] += steps
            entry[3] += float(seconds)
        compute = float(np.nansum(step_seconds))
        wall = (time.perf_counter_ns() - start_ns) / 1e9
        overhead_each = max(0.0, wall - compute) / max(steps, 1)
        data_wait = self.round_trip_wait_ns / 1e9
        self.round_trip_wait_ns = 0
        self.compiled_in_round_trip = True
        cursor = start_ns
        kernel_share = kernel_seconds / max(kernel_seconds.sum(), 1e-30)
        phases = _kernel_phases(executable)
        for k, seconds in enumerate(step_seconds):
            seconds = float(seconds) if np.isfinite(seconds) else 0.0
            by_phase = collections.Counter()
            for phase, share in zip(phases, kernel_share):
                by_phase[phase] += share * seconds * 1e9
            by_phase["data_wait"] = data_wait * 1e9 / steps
            total = int((seconds + overhead_each) * 1e9 + by_phase["data_wait"])
            self._add_step(cursor, total, by_phase)
            cursor += total

    def compiled_step(self, executable, program):
        """Run one step of a compiled graph (ms.jit, GRAPH_MODE) with each kernel timed (in C with
        the native runtime); its kernels join the op table and their time the current step's phases."""
        import numpy as np
        seconds = np.zeros(len(executable.plan), np.float64)
        start = time.perf_counter_ns()
        if program is not None:
            program.run(seconds)
        else:
            for i, kernel in enumerate(executable.plan):
                before = time.perf_counter()
                kernel()
                seconds[i] += time.perf_counter() - before
        for index, (node, spent) in enumerate(zip(executable.plan_nodes, seconds)):
            entry = self.kernels.get((id(executable), index))
            if entry is None:
                entry = self.kernels[(id(executable), index)] = [_kernel_name(index, node), _kernel_type(node), 0,
                                                                 0.0, _fused_ops(node)]
            entry[2] += 1
            entry[3] += float(spent)
        for phase, spent in zip(_kernel_phases(executable), seconds):
            self.phase_ns[phase] += int(spent * 1e9)
        self._event(f"compiled step ({len(seconds)} kernels)", "compiled", self.main_thread, start,
                    time.perf_counter_ns() - start)

    # ---- dataset pipeline ---------------------------------------------------------------------------
    def dataset_stats(self, node, label, children):
        """The mutable [label, rows, inclusive_ns, child ids] entry of a dataset node."""
        with self._lock:
            entry = self.dataset.get(id(node))
            if entry is None:
                entry = self.dataset[id(node)] = [label, 0, 0, children]
                self._keep_nodes = getattr(self, "_keep_nodes", []) + [node]  # ids stay unique
            return entry

    # ---- dataset workers ---------------------------------------------------------------------------
    def worker_task(self, fn, name):
        """`fn` wrapped so each call is a slice on its thread's track of the timeline."""
        def task(*args):
            start = time.perf_counter_ns()
            try:
                return fn(*args)
            finally:
                thread = threading.current_thread()
                with self._lock:
                    self.threads.setdefault(thread.ident, thread.name)
                    self._event(name, "dataset", thread.ident, start, time.perf_counter_ns() - start)
        return task


def _kernel_name(index, node):
    if node.op == "fused":
        return f"kernel{index}/fused[{'+'.join(_fused_ops(node))}]"
    return f"kernel{index}/{node.prim.name}"


def _kernel_type(node):
    return "fused" if node.op == "fused" else node.prim.name


def _fused_ops(node):
    if node.op != "fused":
        return []
    group = node.value
    nodes = getattr(group, "nodes", None) or getattr(group, "members", None) or []
    return [n.prim.name for n in nodes if getattr(n, "prim", None) is not None]


def _kernel_phases(executable):
    """Each plan kernel's phase: communication for collectives, optimizer for in-place updates,
    backward after the kernel computing the loss (the first scalar output), else forward."""
    nodes = executable.plan_nodes
    position = {id(n): i for i, n in enumerate(nodes)}
    loss_at = len(nodes)
    for out in executable.graph.outputs:
        base = out.inputs[0] if out.op == "project" else out
        if id(base) in position and out.shape == () and out.dtype is not None and out.dtype.kind == "f":
            loss_at = min(loss_at, position[id(base)])
    phases = []
    for i, node in enumerate(nodes):
        if node.op != "fused" and node.prim.name in COMMUNICATION_OPS:
            phases.append("communication")
        elif node.is_effect:
            phases.append("optimizer")
        else:
            phases.append("backward" if i > loss_at else "forward")
    return phases
