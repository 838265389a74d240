"""`FusedGroup`: the value of a `fused` node — members, inputs, stores, and its compiled kernel.

At bind time the executor calls `build(inputs, outputs)` with the real arrays: the group lays out
strides over its iteration shape, generates the kernel source for that layout (cached in memory
and on disk by its hash), and returns a zero-argument callable running the kernel on those arrays.
"""
import ctypes
import warnings
from functools import partial

import numpy as np

from . import build as _build
from . import native
from .codegen import KernelSource, collapse, operand_strides
from .codegen_reduce import _COLUMN_ROWS, reduction_source, reduction_tables


def _scalar_const(node):
    return node.op == "const" and node.dtype is None and isinstance(node.value, (bool, int, float))


class FusedGroup:
    """Members (calls in order), what the kernel reads, and what it stores where."""

    def __init__(self, name, members, outputs, shape, reduce, mode=None, columns=()):
        self.name = name
        self.members = [m for m in members if m.prim.name != "assign"]
        # in-place writes: (member value, Parameter or state node it is written into)
        self.assigned = [(m.inputs[1], m.inputs[0]) for m in members if m.prim.name == "assign"]
        self.outputs = list(outputs)
        self.shape = tuple(shape)
        self.reduce = reduce
        # 'elementwise', 'rows' (reductions over the last axis), 'axes' (one reduction, any axes) or
        # 'columns' (elementwise, with sums over every axis but the last added up row by row)
        self.mode = mode or ("rows" if reduce else "elementwise")
        self._ids = {id(m) for m in self.members}
        # column sums (sums over every axis but the last), in an elementwise or a row kernel
        self._column_ids = {id(c) for c in columns}
        self.columns = [m for m in self.members if id(m) in self._column_ids]
        externals, seen = [], set()
        for m in self.members:
            for i in m.inputs:
                if id(i) not in self._ids and id(i) not in seen and not _scalar_const(i):
                    seen.add(id(i))
                    externals.append(i)
        self.pointer_inputs = externals
        self.node_inputs = externals + [target for _, target in self.assigned]
        # (member, storage dtype) per store slot: graph outputs first, then the in-place writes
        self.stores = [(o, o.dtype) for o in self.outputs] + [(v, t.dtype) for v, t in self.assigned]
        # a column sum is written row after row: it must not share the block of an input it reads
        column_shapes = {tuple(c.shape) for c in self.columns}
        self.inplace_ok = not self.assigned and not any(tuple(x.shape) in column_shapes for x in externals)

    # -- what codegen asks ---------------------------------------------------------------------
    def is_member(self, node):
        return id(node) in self._ids

    def is_row_value(self, node):
        """One value per row (a reduction or computed from reductions), not one per element."""
        return self.reduce and tuple(node.shape) != self.shape and id(node) not in self._column_ids

    def is_column_sum(self, node):
        """A sum over every axis but the last, added up as the rows are computed."""
        return id(node) in self._column_ids

    def describe(self, indent):
        """Member lines for the graph printout."""
        names = {id(m): f"m{k}" for k, m in enumerate(self.members)}
        ext = {id(x): f"in{k}" for k, x in enumerate(self.pointer_inputs)}

        def ref(n):
            return names.get(id(n)) or ext.get(id(n)) or repr(n.value)
        kind = {"rows": "row kernel", "axes": "reduction", "columns": "column sums"}.get(self.mode, "elementwise")
        kind += " with column sums" if self.columns and self.mode == "rows" else ""
        lines = [f"{indent}{kind} over {list(self.shape)}:"]
        for m in self.members:
            attrs = {k: v for k, v in m.attrs.items() if k in ("axis", "keepdims", "shape")}
            extra = (", " + ", ".join(f"{k}={v}" for k, v in attrs.items())) if attrs else ""
            lines.append(f"{indent}  {names[id(m)]}: {m.type_str()} = {m.prim.name}("
                         f"{', '.join(ref(i) for i in m.inputs)}{extra})")
        for value, target in self.assigned:
            lines.append(f"{indent}  {target.label()} <- {names[id(value)]}")
        return lines

    # -- binding -------------------------------------------------------------------------------
    def _layout(self, in_arrays, store_arrays):
        shape = self.shape
        row = shape[:-1] + (1,)
        stores = [a.reshape(row) if self.is_row_value(m) else a for (m, _), a in zip(self.stores, store_arrays)]
        strides = [operand_strides(a, shape) for a in list(in_arrays) + stores]
        sizes, collapsed = collapse(shape, strides, keep_last=self.reduce or self.mode == "columns")
        return sizes, collapsed

    def _reduction_source(self, in_arrays, store_arrays):
        (node,) = self.members
        x, y = in_arrays[0], store_arrays[0]
        axis = node.attrs.get("axis")
        axes = range(x.ndim) if axis is None else ([axis] if np.isscalar(axis) else axis)
        if not y.flags.c_contiguous:
            raise ValueError(f"{self.name}: the output buffer is not contiguous")
        leading, kept, reduced = reduction_tables(x, {a % x.ndim for a in axes})
        contiguous = bool(np.array_equal(kept, np.arange(kept.size)))
        text = reduction_source(node, leading, contiguous)
        return text, [kept.size, reduced.size] + kept.tolist() + reduced.tolist()

    def source(self, in_arrays, store_arrays):
        """(C++ source, params) for these arrays."""
        if self.mode == "axes":
            return self._reduction_source(in_arrays, store_arrays)
        sizes, strides = self._layout(in_arrays, store_arrays)
        classes = [0 if st[-1] == 0 else (1 if st[-1] == 1 else 2) for st in strides]
        n_in = len(self.pointer_inputs)
        for (m, _), cls in zip(self.stores, classes[n_in:]):
            if self.is_column_sum(m) and cls != 1:
                raise ValueError(f"{self.name}: a column sum's output buffer is not contiguous")
            if cls == 0 and not self.is_row_value(m) and sizes[-1] > 1:
                raise ValueError(f"{self.name}: an output buffer is broadcast")
        row_strides = [st[0] for st in strides] if len(sizes) == 2 else None
        text = KernelSource(self, "ms_kernel", sizes, classes, row_strides).source()
        params = list(sizes) + [s for st in strides for s in st]
        return text, params

    def build(self, ins, outs):
        """A callable running this group on the bound arrays `ins` (inputs then targets) -> `outs`."""
        n_in = len(self.pointer_inputs)
        in_arrays = [np.asarray(a) for a in ins[:n_in]]
        store_arrays = list(outs) + list(ins[n_in:])
        try:
            text, params = self.source(in_arrays, store_arrays)
            function = _build.load(text, "ms_kernel")
        except (_build.KernelBuildError, OSError, ValueError) as exc:
            warnings.warn(f"graph kernel {self.name} runs on numpy: {exc}")
            return self._numpy(ins, outs)
        arrays = in_arrays + store_arrays + self._partial_sums()  # kept alive by the closure
        step = native.c_step(function, [a.ctypes.data for a in arrays], params)
        run = partial(function, ctypes.addressof(step[1]), ctypes.addressof(step[2]))
        run.keep = (arrays, *step[1:])
        run.native = ("kernel", *step)  # what the C step runner calls directly
        return run

    def _partial_sums(self):
        """The partial sums of a kernel with column sums: (tasks, width) per sum (codegen_reduce)."""
        if not self.columns:
            return []
        tasks = -(-int(np.prod(self.shape[:-1])) // _COLUMN_ROWS)
        return [np.empty((tasks, self.shape[-1]), dtype) for m, dtype in self.stores if self.is_column_sum(m)]

    def _numpy(self, ins, outs):
        """The members one by one with their numpy kernels (no compiler, or a failed build)."""
        n_in = len(self.pointer_inputs)
        bound = {id(x): a for x, a in zip(self.pointer_inputs, ins[:n_in])}
        targets = list(ins[n_in:])

        def run():
            values = dict(bound)
            for m in self.members:
                args = [values[id(i)] if id(i) in values else i.value for i in m.inputs]
                values[id(m)] = m.prim.impl(*args, **m.attrs)
            for (m, _), out in zip(self.stores, list(outs) + targets):
                np.copyto(out, np.reshape(values[id(m)], out.shape), casting="unsafe")
        return run

