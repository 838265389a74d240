"""Data dump: inputs and outputs of selected ops, parameters and gradients, as `.npy` with a JSON index.

A dump config is MindSpore's (JSON or YAML):

    {"common_dump_settings": {"dump_mode": 1, "path": "/tmp/dump", "net_name": "mlp",
                              "iteration": "0|5-8", "input_output": 0,
                              "kernels": ["dense", "name-regex(^softmax)"], "support_device": [0]}}

- dump_mode: 0 every op; 1 only the ops (and parameters) named in `kernels`.
- iteration: "all", or '|'-separated steps and ranges "a-b" (0-based training steps).
- input_output: 0 inputs and outputs, 1 inputs only, 2 outputs only.
- kernels: op names (the primitive, 'dense', or a dump name '00012.dense'), parameter names, or
  'name-regex(<python regex>)'.
- support_device: ranks that dump (default all).

Files: `<path>/rank_<r>/<net_name>/<step>/<seq>.<op>.<input|output|parameter|gradient>.<slot>.npy`
and `<path>/rank_<r>/<net_name>/index.json`: one entry per file with rank, step, seq, op, kind,
slot, shape, dtype, file. `seq` numbers the op calls of a step, so two runs of the same program
give the same names; `mstrain dump compare A B` finds where two runs part ways.

In sink mode the compiled plan runs kernel by kernel from Python while dumping: the outputs of the
selected kernels are saved as 'kernel<i>.<op>' (or 'kernel<i>.fused'), and the parameters after
every step, so an eager and a sink run can be compared step by step on their parameters.
Graph-mode (jit) steps are dumped the same way (kernel outputs, parameters), except the first,
whose values come from the trace. Gradients are dumped where the optimizer is called from Python
(eager steps).

    with Dumper("dump.json"):
        model.train(1, data)
"""
import json
import os
import re

import numpy as np

from ..errors import ConfigError
from ..fileio import write_json_atomically
from ..ops.primitive import dispatch

__all__ = ["DumpConfig", "Dumper", "load_dump_config"]

_KINDS = ("input", "output", "parameter", "gradient")


class DumpConfig:
    """A validated `common_dump_settings` (see the module docstring)."""

    def __init__(self, path, net_name="net", dump_mode=0, iteration="all", input_output=0, kernels=(),
                 support_device=None, source="dump config"):
        where = f"{source}: common_dump_settings"
        if not isinstance(path, str) or not path:
            raise ConfigError(f"{where}.path: a directory is required", key="path")
        if dump_mode not in (0, 1):
            raise ConfigError(f"{where}.dump_mode must be 0 (all ops) or 1 (the listed kernels), got {dump_mode!r}")
        if input_output not in (0, 1, 2):
            raise ConfigError(f"{where}.input_output must be 0, 1 or 2, got {input_output!r}")
        if not isinstance(kernels, (list, tuple)) or not all(isinstance(k, str) for k in kernels):
            raise ConfigError(f"{where}.kernels must be a list of op names or 'name-regex(...)' patterns")
        if dump_mode == 1 and not kernels:
            raise ConfigError(f"{where}.kernels: dump_mode 1 dumps the listed kernels, but none are listed")
        self.path, self.net_name, self.dump_mode = path, str(net_name), dump_mode
        self.input_output, self.support_device = input_output, support_device
        self.steps = _parse_iteration(iteration, where)
        self._names, self._patterns = set(), []
        for k in kernels:
            match = re.fullmatch(r"name-regex\((.*)\)", k)
            if match:
                try:
                    self._patterns.append(re.compile(match.group(1)))
                except re.error as exc:
                    raise ConfigError(f"{where}.kernels: bad regex {match.group(1)!r}: {exc}") from None
            else:
                self._names.add(k)

    def wants_step(self, step):
        return self.steps is None or any(lo <= step <= hi for lo, hi in self.steps)

    def wants(self, *names):
        if self.dump_mode == 0:
            return True
        return any(n in self._names or any(p.search(n) for p in self._patterns) for n in names)


def _parse_iteration(text, where):
    text = str(text).strip()
    if text == "all":
        return None
    ranges = []
    for part in text.split("|"):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+))?\s*", part)
        if not match:
            raise ConfigError(f"{where}.iteration: {part!r} is not a step or a range 'a-b' ('all', '0|5-8')")
        lo = int(match.group(1))
        hi = int(match.group(2)) if match.group(2) is not None else lo
        if hi < lo:
            raise ConfigError(f"{where}.iteration: range {part!r} ends before it starts")
        ranges.append((lo, hi))
    return ranges


def load_dump_config(source):
    """A DumpConfig from a JSON/YAML file path or a dict with 'common_dump_settings'."""
    name = "dump config"
    if not isinstance(source, dict):
        name = os.fspath(source)
        try:
            with open(name) as f:
                text = f.read()
        except OSError as exc:
            raise ConfigError(f"cannot read dump config {name!r}: {exc.strerror}") from None
        import yaml  # JSON is YAML
        try:
            source = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"dump config {name!r} is not valid JSON or YAML: {exc}") from None
    settings = source.get("common_dump_settings") if isinstance(source, dict) else None
    if not isinstance(settings, dict):
        raise ConfigError(f"{name}: needs a 'common_dump_settings' mapping")
    known = {"path", "net_name", "dump_mode", "iteration", "input_output", "kernels", "support_device"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ConfigError(f"{name}: common_dump_settings: unknown key(s) {unknown}; valid: {sorted(known)}")
    return DumpConfig(source=name, **settings)


class Dumper:
    """Dump what a DumpConfig selects while active (a context manager; `start()` / `stop()`)."""

    def __init__(self, config):
        self.config = config if isinstance(config, DumpConfig) else load_dump_config(config)
        from ..profiler.profiler import _rank_and_size
        self.rank = _rank_and_size()[0]
        self.folder = os.path.join(self.config.path, f"rank_{self.rank}", self.config.net_name)
        self.index = []
        self.step = -1          # 0-based training step; -1 before the first batch
        self.seq = 0
        self._saved_call = None
        self.active = (self.config.support_device is None or self.rank in self.config.support_device)

    # ---- the observer protocol of mstrain.ops.primitive.dispatch.profiler --------------------------------
    def run_op(self, prim, inputs, attrs, run):
        if self.step < 0 or not self.config.wants_step(self.step):
            return run(prim, inputs, attrs)
        seq, self.seq = self.seq, self.seq + 1
        if not self.config.wants(prim.name, f"{seq:05d}.{prim.name}"):
            return run(prim, inputs, attrs)
        if self.config.input_output in (0, 1):  # before the call: some ops update an input in place
            for slot, x in enumerate(inputs):
                self._save(seq, prim.name, "input", slot, x)
        result = run(prim, inputs, attrs)
        if self.config.input_output in (0, 2):
            outs = result if isinstance(result, tuple) else (result,)
            for slot, x in enumerate(outs):
                self._save(seq, prim.name, "output", slot, x)
        return result

    def timed_batches(self, batches, feed=None):
        for batch in batches:
            self._end_step()
            self.step += 1
            self.seq = 0
            yield batch

    def finish_round_trip(self):
        self._end_step()

    def worker_task(self, fn, name):
        return fn

    def kernel_seconds_for(self, executable):
        return None

    def add_compiled_run(self, executable, kernel_seconds, step_seconds, start_ns):
        """Not reached: `run_sink` runs compiled sinks while dumping."""

    def run_sink(self, executable, batches, loss, losses, seconds):
        """A compiled sink, step by step from Python: the outputs of the selected plan kernels
        ('kernel<i>.<op>' or 'kernel<i>.fused', numbered in plan order) and the parameters after
        every step. Its batches were all fetched first, so `self.step` is its last step."""
        import time
        last = self.step
        for k, batch in enumerate(batches):
            start = time.perf_counter()
            self.step = last - len(batches) + 1 + k
            wanted = self.config.wants_step(self.step) and self.config.input_output in (0, 2)
            executable.load_inputs(batch)
            self._run_plan(executable, wanted)
            losses[k] = loss
            seconds[k] = time.perf_counter() - start
            self._step_ran = True
            self._end_step()

    def compiled_step(self, executable, program):
        """One graph-mode (jit) step of a compiled plan: kernel by kernel, selected outputs saved."""
        wanted = self.step >= 0 and self.config.wants_step(self.step) and self.config.input_output in (0, 2)
        self._run_plan(executable, wanted)
        self._step_ran = True

    def _run_plan(self, executable, wanted):
        for i, (kernel, node) in enumerate(zip(executable.plan, executable.plan_nodes)):
            kernel()
            op = f"kernel{i}.{'fused' if node.op == 'fused' else node.prim.name}"
            if wanted and self.config.wants(op, "fused" if node.op == "fused" else node.prim.name):
                for slot, out in enumerate(executable._outputs_of(node)):
                    self._save(i, op, "output", slot, executable._arrays[id(out)])

    # ---- parameters and gradients ----------------------------------------------------------------
    _optimizer = None
    _step_ran = False
    _params_dumped_at = None

    def _end_step(self):
        ran, self._step_ran = self._step_ran or self.seq > 0, False
        if (not ran or self.step < 0 or self._params_dumped_at == self.step
                or not self.config.wants_step(self.step) or self._optimizer is None):
            return
        self._params_dumped_at = self.step
        for param in self._optimizer.parameters:
            if self.config.wants(param.name):
                self._save(-1, param.name, "parameter", 0, param)
        self._flush_index()

    def _optimizer_call(self, original):
        dumper = self

        def call(optimizer, gradients, *args, **kwargs):
            dumper._optimizer = optimizer
            if dispatch.tracer is None and dumper.step >= 0 and dumper.config.wants_step(dumper.step):
                dumper._step_ran = True
                for param, grad in zip(optimizer.parameters, gradients):
                    if dumper.config.wants(param.name):
                        dumper._save(-1, param.name, "gradient", 0, grad)
            return original(optimizer, gradients, *args, **kwargs)
        return call

    def _save(self, seq, op, kind, slot, value):
        if not self.active:
            return
        array = np.asarray(value.asnumpy() if hasattr(value, "asnumpy") else value)
        if array.dtype == object:
            return
        folder = os.path.join(self.folder, str(self.step))
        os.makedirs(folder, exist_ok=True)
        prefix = f"{seq:05d}." if seq >= 0 else ""
        name = f"{prefix}{op}.{kind}.{slot}.npy"
        np.save(os.path.join(folder, name), array)
        self.index.append({"rank": self.rank, "step": self.step, "seq": seq, "op": op, "kind": kind,
                           "slot": slot, "shape": list(array.shape), "dtype": str(array.dtype),
                           "file": f"{self.step}/{name}"})

    def _flush_index(self):
        if self.active and self.index:
            write_json_atomically(os.path.join(self.folder, "index.json"), {"entries": self.index})

    # ---- lifetime ----------------------------------------------------------------------------------
    def start(self):
        if dispatch.profiler is not None:
            raise RuntimeError("Dumper.start: a Profiler or another Dumper is running; stop it first")
        from ..nn.cell import Cell
        from ..nn.optim.optimizer import Optimizer
        self._had_call = "__call__" in vars(Optimizer)
        self._saved_call = vars(Optimizer).get("__call__")
        Optimizer.__call__ = self._optimizer_call(self._saved_call or Cell.__call__)
        dispatch.profiler = self
        return self

    def stop(self):
        if dispatch.profiler is self:
            from ..nn.optim.optimizer import Optimizer
            dispatch.profiler = None
            if self._had_call:
                Optimizer.__call__ = self._saved_call
            else:
                del Optimizer.__call__
            self._end_step()
            self._flush_index()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()
        return False
