"""The executor: a compiled graph as a flat list of zero-argument kernels over planned buffers.

Binding turns the graph into that list once: every computed value gets a buffer from the memory
plan, views (reshape, transpose, broadcast, slices) become fixed numpy views of their base
buffers, and each call becomes a closure writing into its buffer (`out=` numpy kernels, generated
C++ kernels for fused groups, or the primitive's impl with a copy). Running a step is then one
loop over closures: no graph walk, no dispatch, no allocation for the planned values.

Parameters and optimizer state are read by reference; if a Parameter's array is replaced
(`set_data`, loading a checkpoint) the executable re-binds before its next run.
"""

import time

import numpy as np

from ..ops.primitive import dispatch
from . import copies, lowering  # noqa: F401  (copies: the layout ops' lowering rules)
from .build import native_enabled as _native_enabled
from .memory import Step, aligned_zeros, plan_memory
from .half_feed import feed_rounded, feeds_half, round_half_address
from .half_shadow import HalfShadow, is_half_exact, refresh_all
from .index_guard import IndexGuards

_INPLACE_UNSAFE = {"where", "cast"}  # their out= kernels read an input after writing the output


def _attach_gemm(kernel, node, ins, out):
    """Mark a matrix product the C runner can issue as eager computes it: the short-side kernel
    (mstrain.kernels.thin_gemm) or numpy's own BLAS call (and a sum over leading axes, or over the
    last one, as the same additions in C). Returns the kernel to run: `kernel`, or for a
    transformer-shaped product the packed GEMM's (mstrain.kernels.gemm_panel)."""
    if node.prim.name == "sum_to" and isinstance(ins[0], np.ndarray):
        from .half import attach_half_sum_rows
        if attach_half_sum_rows(kernel, ins[0], out):
            return kernel
        from .native import sum_last_params, sum_rows_params
        params = sum_rows_params(ins[0], out)
        if params is not None:
            kernel.native = ("sum_rows", (ins[0], out), params)
            return kernel
        params = sum_last_params(ins[0], out)
        if params is not None:
            kernel.native = ("sum_last", (ins[0], out), params)
        return kernel
    if node.prim.name == "matmul":
        a, b = ins
    elif node.prim.name == "dense_weight_grad":
        a, b = ins[0].T, ins[1]
    else:
        return kernel
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        from ..kernels import thin_gemm
        from ..kernels.blas_params import gemm_params
        thin = thin_gemm.product_params(a, b, out) if a.dtype == b.dtype == out.dtype else None
        if thin is not None:  # eager's kernel for a product with a short side
            kernel.native = ("thin_gemm", (a, b, out), thin)
            return kernel
        params = gemm_params(a, b, out)
        if params is not None:
            kernel.native = ("gemm", (a, b, out), params)
            from ..kernels.gemm_panel import step_kernel
            panel = step_kernel(a, b, out, params)  # a transformer-shaped product: the packed GEMM
            if panel is not None:
                return panel
            from .gemm_layout import swapped_steps
            swapped = swapped_steps(a, b, out)  # x @ W.T with few rows: the faster layout
            if swapped is not None:
                kernel.native, kernel.scratch = ("steps", swapped[0]), swapped[1]
    return kernel


def _half_gemm(node, ins, out):
    """A float16 matrix product as float32 BLAS on converted copies (mstrain.graph.half), or None."""
    if out.dtype != np.float16 or node.prim.name not in ("matmul", "dense_weight_grad"):
        return None
    a, b = ins
    if node.prim.name == "dense_weight_grad" and isinstance(a, np.ndarray):
        a = a.T
    from .half import half_gemm
    return half_gemm(a, b, out, exact=[is_half_exact(i) for i in node.inputs])


class ResidentChanged(RuntimeError):
    """A Parameter read by a compiled graph changed shape or dtype: the graph must be traced again."""


def _is_view_candidate(node):
    return node.op == "call" and node.is_pure and (node.prim.kind == "view" or node.prim.name == "identity")


class Executable:
    """A bound, runnable graph. `run(inputs)` -> list of output arrays."""

    def __init__(self, graph):
        self.graph = graph
        # every step's batch is copied in here (C loop, load_inputs): on 64-byte boundaries, so the
        # first kernels' row loads do not split cache lines by the luck of where malloc put them
        self._input_buffers = [aligned_zeros(n.shape, n.dtype) for n in graph.inputs]
        self._rounded_inputs = [feeds_half(n) for n in graph.inputs]  # stored rounded to float16 (half_feed)
        self._round_half = round_half_address() if any(self._rounded_inputs) else None
        self._residents = [n for n in graph.nodes if n.op == "resident"]
        self._shadows = [n.value for n in self._residents if isinstance(n.value, HalfShadow)]
        self._projections = {}
        for n in graph.nodes:
            if n.op == "project":
                self._projections.setdefault(id(n.inputs[0]), []).append(n)
        self.plan = None
        self.memory = None
        self._bound = ()
        self.bind()

    # -- binding ----------------------------------------------------------------------------------
    def bind(self):
        """(Re)build the kernel list against the current Parameter arrays."""
        arrays = self._source_arrays()
        views, owned = self._classify(dict(arrays))
        root = self._roots(views)
        steps, step_nodes = self._memory_steps(owned, root)
        pinned = [id(root(o)) for o in self.graph.outputs]
        self.memory = plan_memory(steps, pinned)
        blocks = self.memory.allocate()
        for n in owned:
            arrays[id(n)] = self.memory.buffer(blocks, n)
        plan, plan_nodes = [], []
        self.copied_bytes = 0
        for node in self.graph.nodes:
            if id(node) in views:
                arrays[id(node)] = views[id(node)][0](arrays)
                continue
            if node.op in ("input", "resident", "const", "project"):
                continue
            plan.append(self._kernel(node, arrays))
            plan_nodes.append(node)
        self.plan, self.plan_nodes = plan, plan_nodes
        self._index_guards = IndexGuards(self.graph.name, plan_nodes, plan, self._input_buffers)
        self._native = None
        self._arrays = arrays
        self._bound = [(n.value, n.value._data) for n in self._residents]

    def _source_arrays(self):
        arrays = {}
        for n in self.graph.inputs:
            arrays[id(n)] = self._input_buffers[n.value]
        for n in self._residents:
            data = n.value._data
            if data.shape != n.shape or data.dtype != n.dtype:
                name = getattr(n.value, "name", "state")
                raise ResidentChanged(f"{name} is now {data.dtype}{list(data.shape)}, the graph was traced "
                                      f"with {n.dtype}{list(n.shape)}")
            arrays[id(n)] = data
        for n in self.graph.nodes:
            if n.op == "const":
                arrays[id(n)] = n.value
        return arrays

    def _outputs_of(self, node):
        """The value nodes a computing node writes (its projections when it has several)."""
        if node.shape is not None:
            return [node]
        return self._projections.get(id(node), [])

    def _classify(self, layout):
        """Which nodes are views of others (bound once) and which need their own buffer.

        Views are found by running the view op on stand-in arrays laid out like the real buffers.
        """
        views, owned = {}, []
        for node in self.graph.nodes:
            if node.op not in ("call", "fused"):
                continue
            outs = self._outputs_of(node)
            if _is_view_candidate(node) and self._is_view(node, outs, layout, views):
                continue
            for o in outs:
                if o.dtype is not None and o.shape is not None:
                    owned.append(o)
                    layout[id(o)] = np.zeros(o.shape, o.dtype)
        return views, owned

    def _is_view(self, node, outs, layout, views):
        ins = [layout[id(i)] for i in node.inputs]
        result = node.prim.impl(*ins, **node.attrs)
        results = [result] if node.shape is not None else list(result)
        if len(results) != len(outs):
            return False
        bases = []
        for r in results:
            base = next((i for i, a in zip(node.inputs, ins) if isinstance(a, np.ndarray) and
                         isinstance(r, np.ndarray) and np.may_share_memory(r, a)), None)
            if base is None:
                return False
            bases.append(base)
        for k, (o, r, base) in enumerate(zip(outs, results, bases)):
            layout[id(o)] = r
            views[id(o)] = (_view_builder(node, k if node.shape is None else None), base)
        if node.shape is None:
            views[id(node)] = (lambda arrays: None, None)
        return True

    @staticmethod
    def _roots(views):
        """node -> the node owning its memory (a view's root is its base's root)."""
        def root(node):
            while id(node) in views and views[id(node)][1] is not None:
                node = views[id(node)][1]
            return node
        return root

    def _memory_steps(self, owned, root):
        owned_ids = {id(n) for n in owned}
        steps, step_nodes = [], []
        for node in self.graph.nodes:
            if node.op not in ("call", "fused"):
                continue
            writes = [o for o in self._outputs_of(node) if id(o) in owned_ids]
            reads = [root(i) for i in node.inputs]
            reads = [r for r in reads if id(r) in owned_ids]
            inplace = (node.op == "call" and node.prim.kind == "elementwise" and node.is_pure and
                       node.prim.name not in _INPLACE_UNSAFE) or \
                      (node.op == "fused" and node.value.inplace_ok)
            steps.append(Step(writes, reads, inplace))
            step_nodes.append(node)
        return steps, step_nodes

    def _kernel(self, node, arrays):
        ins = [arrays[id(i)] for i in node.inputs]
        outs = [arrays.get(id(o)) for o in self._outputs_of(node)]
        if node.op == "fused":
            return node.value.build(ins, outs)
        host = node.prim.host_kernel
        if host is not None and all(isinstance(o, np.ndarray) for o in outs):
            kernel = host(node, ins, outs)
            if kernel is not None:
                return kernel
        if node.shape is not None and outs[0] is not None:  # (an op writing state in place writes it too)
            kernel = _half_gemm(node, ins, outs[0])
            if kernel is not None:
                return kernel
            kernel = lowering.out_kernel(node, ins, outs[0])
            if kernel is not None:
                return _attach_gemm(kernel, node, ins, outs[0])
        elif node.shape is None and node.prim.num_outputs != 1 and node.prim.lowering is not None:
            kernel = lowering.out_kernel(node, ins, self._outputs_by_index(node, arrays))
            if kernel is not None:
                return kernel
        self.copied_bytes += sum(o.nbytes for o in outs if isinstance(o, np.ndarray))
        kernel = lowering.impl_kernel(node, ins, outs)
        if node.prim.name == "assign" and _native_enabled():  # a lone state write: a copy in C
            from .native import copy_steps
            native = copy_steps(ins[1], ins[0])
            if native is not None:
                kernel.native = native
        return kernel

    def _outputs_by_index(self, node, arrays):
        """The planned buffer of each output of a several-output node, None where it is unused."""
        projections = self._projections.get(id(node), [])
        count = node.prim.num_outputs  # -1: as many as the attributes say (split), here the used ones
        outs = [None] * (count if count >= 0 else 1 + max((p.value for p in projections), default=-1))
        for projection in projections:
            outs[projection.value] = arrays.get(id(projection))
        return outs

    # -- running ----------------------------------------------------------------------------------
    def native(self):
        """The plan as a C program (mstrain.graph.native), or None without a compiler or when disabled."""
        if self._native is None and _native_enabled():
            from .native import NativeProgram, runtime
            self._native = NativeProgram(self.plan) if runtime() is not None else False
        return self._native or None

    def check_residents(self):
        """Rebind when a resident's storage was replaced since binding (a checkpoint loaded, ...)."""
        for holder, array in self._bound:
            if holder._data is not array:
                self.bind()
                return

    def load_inputs(self, inputs):
        """Copy the step's input arrays into the graph's input buffers."""
        for buffer, value, rounded in zip(self._input_buffers, inputs, self._rounded_inputs):
            if rounded:
                feed_rounded(buffer, value)
            else:
                np.copyto(buffer, value, casting="unsafe")

    def step(self):
        """Execute the plan once on the loaded inputs (kernel by kernel timed while a profiler runs)."""
        program = self.native()
        profiler = dispatch.profiler
        if profiler is not None and hasattr(profiler, "compiled_step"):
            profiler.compiled_step(self, program)
            return
        if program is not None:
            program.run()
            return
        for kernel in self.plan:
            kernel()

    def input_arrays(self):
        """The buffers every step's inputs are copied into, the arrays the plan reads (64-byte aligned)."""
        return list(self._input_buffers)

    def output_arrays(self):
        """The arrays holding the outputs now (views of the executor's buffers: copy to keep)."""
        return [self._arrays[id(o)] for o in self.graph.outputs]

    def run(self, inputs):
        """One execution: load `inputs`, run, return copies of the outputs (residents by reference)."""
        self.check_residents()
        guards = self._index_guards
        if guards:
            guards.check_inputs([inputs])
            guards.reset()
        refresh_all(self._shadows)
        self.load_inputs(inputs)
        self.step()
        if guards:
            guards.raise_bad()
        result = []
        for node in self.graph.outputs:
            if node.op == "resident":
                result.append(node.value._data)
            elif node.op == "input":
                result.append(inputs[node.value])
            else:
                value = self._arrays[id(node)]
                result.append(value.copy() if isinstance(value, np.ndarray) else value)
        return result

    def run_steps(self, batches, output_index, values, seconds):
        """The loop sink: one execution per batch with no other work per step; output
        `output_index` (a scalar, the loss) of each step goes to `values`, the wall time of each
        step to `seconds`. Several batches loop in C; a single one (a full-batch step per round
        trip) runs directly, sparing the loop's per-call set-up."""
        self.check_residents()
        guards = self._index_guards
        if guards:  # before any step: a bad id in any batch raises as eager's gather does
            guards.check_inputs(batches)
            guards.reset()
        refresh_all(self._shadows)
        kept = self.output_arrays()[output_index]
        profiler = dispatch.profiler
        if getattr(profiler, "run_sink", None) is not None:  # a data dump: kernel by kernel from Python
            profiler.run_sink(self, batches, kept, values, seconds)
            return
        kernel_seconds = None if profiler is None else profiler.kernel_seconds_for(self)
        started = time.perf_counter_ns()
        program = self.native()
        if ((len(batches) > 1 or kernel_seconds is not None) and program is not None
                and isinstance(kept, np.ndarray) and kept.dtype in (np.float32, np.float64)):
            program.loop(self._input_buffers, batches, kept, values, seconds, kernel_seconds, self._rounded_inputs,
                         self._round_half)
        else:
            self._python_steps(batches, kept, values, seconds, kernel_seconds)
        if profiler is not None:
            profiler.add_compiled_run(self, kernel_seconds, seconds, started)
        if guards:
            guards.raise_bad()

    def _python_steps(self, batches, kept, values, seconds, kernel_seconds):
        """The loop sink without the C loop; with `kernel_seconds`, each kernel timed (profiler)."""
        for k, batch in enumerate(batches):
            start = time.perf_counter()
            self.load_inputs(batch)
            if kernel_seconds is None:
                self.step()
            else:
                for i, kernel in enumerate(self.plan):
                    before = time.perf_counter()
                    kernel()
                    kernel_seconds[i] += time.perf_counter() - before
            values[k] = kept
            seconds[k] = time.perf_counter() - start

    def stats(self):
        """Counts for logs and benchmarks. copied_bytes: what one step copies from primitives' own
        results into planned buffers (ops with no `out=` kernel), a cost eager does not pay."""
        return {"kernels": len(self.plan), "fused": self.graph.count("fused"),
                "planned_bytes": self.memory.planned_bytes, "unplanned_bytes": self.memory.naive_bytes,
                "copied_bytes": self.copied_bytes}


def _view_builder(node, index):
    """A function computing the node's view from the bound arrays of its inputs."""
    impl, attrs, inputs = node.prim.impl, node.attrs, node.inputs

    def build(arrays):
        result = impl(*[arrays[id(i)] for i in inputs], **attrs)
        return result if index is None else result[index]
    return build
