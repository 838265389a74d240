"""C++ source for one fused group: an elementwise loop nest, or a row kernel with reductions.

A group computes its members (primitive calls with a `cpp` expression template, and
sum/mean/max/min reductions over the last axis) over an iteration shape S. Its inputs broadcast
to S; each is read through strides, so broadcasting, views and odd sizes need no copies. The
layout is collapsed first (adjacent dims that are contiguous for every operand merge), and the
innermost loop is specialised per input as contiguous, broadcast or strided, so it vectorises.

    elementwise:  for each row (OpenMP)  for j (simd):  load inputs, compute members, store outputs
    row kernel:   for each row (OpenMP)  for each reduction: for j (simd): compute its input, reduce
                                         row values (e.g. rstd = 1/sqrt(var + eps))
                                         for j (simd): compute and store the full-shape outputs

Kernels use a C ABI, `void name(void** pointers, const int64_t* params)`, with params = the
collapsed sizes then every operand's strides in elements. float16 is stored as its 16 bits and
computed in float, rounded to half after every op as numpy does; the conversions are branch-free
integer code (exact round-to-nearest-even, numpy's), so float16 loops vectorise like float32 ones
(the compiler does not vectorise `_Float16` conversions).
"""
import numpy as np

from .codegen_c import (PRELUDE, _BLOCK, _FLOAT_LITERAL, _HALF_CHUNK, _ROW_SPAN, _SHORT_ROW, _SPLIT_ALIGN, _STASH_MAX,
                        _is_half, compute_type, literal, load_value, parallel_min, round_value, storage_type,
                        store_value)
from .codegen_reduce import row_tasks_kernel


# ---------------------------------------------------------------------------------------------
# Layout: strides over the iteration shape, collapsed
# ---------------------------------------------------------------------------------------------

def operand_strides(array, shape):
    """Element strides of `array` read as if broadcast to `shape` (0 along broadcast dims)."""
    lead = len(shape) - array.ndim
    strides = [0] * len(shape)
    for k, (n, s) in enumerate(zip(array.shape, array.strides)):
        if n != 1:
            strides[lead + k] = s // array.itemsize
    return strides


def collapse(shape, strides, keep_last):
    """Merge adjacent dims contiguous for every operand; drop size-1 dims.

    Returns (sizes, strides per operand). With keep_last the last dim stays its own (the
    reduction axis of a row kernel).
    """
    last = len(shape) - 1
    dims = [k for k, n in enumerate(shape) if n != 1 or (keep_last and k == last)]
    sizes, merged = [], [[] for _ in strides]
    for k in dims:
        mergeable = sizes and not (keep_last and k == last) and all(
            st[-1] == s[k] * shape[k] for st, s in zip(merged, strides))
        if mergeable:
            sizes[-1] *= shape[k]
            for st, s in zip(merged, strides):
                st[-1] = s[k]
        else:
            sizes.append(shape[k])
            for st, s in zip(merged, strides):
                st.append(s[k])
    if not sizes:
        return [1], [[0] for _ in strides]
    return sizes, merged


# ---------------------------------------------------------------------------------------------
# Expressions of members
# ---------------------------------------------------------------------------------------------

def _operand_type(node, operands):
    """The type numpy computes `node` in: the common type of its array operands (weak Python
    scalars adapt), or the result type when integers are divided into a float."""
    dtypes = [o.dtype for o in operands if o.dtype is not None]
    common = np.result_type(*dtypes) if dtypes else node.dtype
    if node.dtype.kind == "f" and common.kind != "f":
        common = node.dtype
    return common


def _attr_text(name, value):
    if name == "dtype":
        return compute_type(np.dtype(value))
    return literal(value)


class _Expressions:
    """C++ statements computing members, given how each operand node is referenced."""

    def __init__(self, group, ref, unrounded=frozenset()):
        self.group = group
        self.ref = ref  # node -> C expression for an input operand
        self.unrounded = unrounded  # ids of members whose only use is a float16 store (it rounds them)

    def statement(self, node, var):
        operands = node.inputs
        op_type = compute_type(_operand_type(node, operands))
        args = []
        for o in operands:
            text = self.ref(o)
            if o.dtype is None or compute_type(o.dtype) != op_type:
                text = f"static_cast<{op_type}>({text})"
            args.append(text)
        attrs = {k: _attr_text(k, v) for k, v in node.attrs.items()
                 if k == "dtype" or isinstance(v, (int, float, np.generic))}
        expr = node.prim.cpp.format(*args, **attrs)
        if op_type in ("float", "double"):  # numpy's weak Python floats: computed in the array's type
            expr = _FLOAT_LITERAL.sub(lambda m: f"static_cast<{op_type}>({m.group(0)})", expr)
        ctype = compute_type(node.dtype)
        if id(node) not in self.unrounded:
            expr = round_value(node.dtype, expr)
        return f"const {ctype} {var} = static_cast<{ctype}>({expr});"


# ---------------------------------------------------------------------------------------------
# Kernel source
# ---------------------------------------------------------------------------------------------

_REDUCE = {
    "sum": ("+", "0", "{acc} += {v};"),
    "mean": ("+", "0", "{acc} += {v};"),
    "max": ("max", "-std::numeric_limits<{t}>::infinity()", "{acc} = std::max({acc}, {v});"),
    "min": ("min", "std::numeric_limits<{t}>::infinity()", "{acc} = std::min({acc}, {v});"),
}


def _accumulator_type(node):
    kind = node.dtype.kind
    if node.prim.name in ("sum", "mean"):
        return "double" if kind == "f" else "int64_t"
    return compute_type(node.dtype)


class KernelSource:
    """Generate the source of one group for one layout (see the module docstring)."""

    def __init__(self, group, symbol, sizes, inner_classes, row_strides=None):
        self.group = group
        self.symbol = symbol
        self.sizes = sizes
        self.inner = inner_classes   # per pointer input: 0 broadcast, 1 contiguous, 2 strided
        self.spans = self._row_spans(row_strides)  # per operand "span" | "tile" | "scalar", or None
        self.var = {id(m): f"v{k}" for k, m in enumerate(group.members)}
        self.slot = {id(x): k for k, x in enumerate(group.pointer_inputs)}
        self.stash = {}      # id(member) -> row scratch array: computed once per row, read back later
        self.stashed = set()  # members already in their scratch array
        self.unrounded = self._stored_only_halves()

    def _stored_only_halves(self):
        """float16 members that no member reads and that are only stored as float16: the store's
        conversion rounds them (to nearest even, as ms_round_half), so rounding them first as well is
        work without effect (a kernel's last op, e.g. an activation times its dropout mask)."""
        read = {id(i) for m in self.group.members for i in m.inputs}
        stored = {}
        for member, dtype in self.group.stores:
            stored[id(member)] = stored.get(id(member), True) and _is_half(dtype)
        return frozenset(id(m) for m in self.group.members
                         if _is_half(m.dtype) and stored.get(id(m)) and id(m) not in read and
                         not self.group.is_row_value(m) and m.prim.kind != "reduce")

    def _row_spans(self, row_strides):
        """How each operand is read when short float16 rows run as spans of whole rows (see
        _span_loop): 'span' (rows one after another), 'tile' (one row read by every row: converted
        once and repeated over a span), 'scalar'; None when the layout is not of that kind."""
        if self.group.reduce or self.group.columns or row_strides is None or len(self.sizes) != 2 or \
                not 2 <= self.sizes[-1] <= _SHORT_ROW:
            return None
        n_in, width = len(self.group.pointer_inputs), self.sizes[-1]
        dtypes = [x.dtype for x in self.group.pointer_inputs] + [d for _, d in self.group.stores]
        if not any(_is_half(d) and cls == 1 for d, cls in zip(dtypes, self.inner)):
            return None  # float32 kernels keep their row loops
        kinds = []
        for k, (cls, row_stride) in enumerate(zip(self.inner, row_strides)):
            if cls == 1 and row_stride == width:
                kinds.append("span")
            elif k < n_in and row_stride == 0 and cls in (0, 1):
                kinds.append("tile" if cls == 1 else "scalar")
            else:
                return None
        return kinds

    # -- references --------------------------------------------------------------------------
    def _load(self, node, in_loop):
        if node.op == "const" and node.dtype is None:
            return literal(node.value)
        k = self.slot[id(node)]
        cls = self.inner[k]
        if in_loop and self.spans is not None and self.spans[k] == "tile":
            return f"tb{k}[jj]"  # the row repeated over the span (see _span_loop)
        if cls == 0:
            return load_value(node.dtype, f"c{k}")  # read once, before the loops (see _pointers)
        if not in_loop:
            index = "0"
        elif cls == 1 and _is_half(node.dtype):
            return f"hb{k}[jj]"  # converted a chunk at a time (see _loop)
        else:
            index = "j" if cls == 1 else f"j * s{k}"
        return load_value(node.dtype, f"a{k}[{index}]")

    def _ref(self, in_loop):
        def ref(node):
            var = self.var.get(id(node))
            return var if var is not None else self._load(node, in_loop)
        return ref

    # -- pieces ------------------------------------------------------------------------------
    def _full_members_for(self, targets, stop=frozenset()):
        """Full-shape members needed to compute `targets`, in order (not looking past `stop`)."""
        group, needed, stack = self.group, set(), list(targets)
        while stack:
            n = stack.pop()
            if id(n) in needed or not group.is_member(n) or group.is_row_value(n):
                continue
            needed.add(id(n))
            if id(n) not in stop:
                stack.extend(n.inputs)
        return [m for m in group.members if id(m) in needed]

    def _loop(self, targets, tail, pragma):
        emit = _Expressions(self.group, self._ref(True), self.unrounded)
        body, stored = [], []
        for m in self._full_members_for(targets, self.stashed):
            var = self.var[id(m)]
            if id(m) in self.stashed:
                body.append(f"const {compute_type(m.dtype)} {var} = {self.stash[id(m)]}[j];")
                continue
            body.append(emit.statement(m, var))
            if id(m) in self.stash:
                body.append(f"{self.stash[id(m)]}[j] = {var};")
                stored.append(id(m))
        self.stashed.update(stored)
        lines = body + tail
        text = "\n".join(lines)
        halves_in = [k for k in range(len(self.group.pointer_inputs)) if f"hb{k}[jj]" in text]
        halves_out = [k for k in range(len(self.group.stores)) if f"ob{k}[jj]" in text]
        if self.spans is not None:
            tiles = [k for k in range(len(self.group.pointer_inputs)) if f"tb{k}[jj]" in text]
            return self._span_loop(lines, pragma, halves_in, halves_out, tiles)
        if not halves_in and not halves_out:
            return [pragma, f"for (int64_t j = 0; j < {self._inner_size()}; ++j) {{"] + \
                ["  " + line for line in lines] + ["}"]
        return self._chunked_loop(lines, pragma, halves_in, halves_out)

    def _chunked_loop(self, lines, pragma, halves_in, halves_out):
        """The loop in chunks: contiguous float16 inputs converted to float buffers before it and
        float16 outputs converted from float buffers after it, by the CPU's conversion
        instructions (ms_h2f_n, ms_f2h_n); the loop itself then only computes in float."""
        size = self._inner_size()
        head = [f"for (int64_t j0 = 0; j0 < {size}; j0 += {_HALF_CHUNK}) {{",
                f"  const int64_t J = std::min<int64_t>({_HALF_CHUNK}, {size} - j0);"]
        head += [f"  float hb{k}[{_HALF_CHUNK}]; ms_h2f_n(a{k} + j0, hb{k}, J);" for k in halves_in]
        head += [f"  float ob{k}[{_HALF_CHUNK}];" for k in halves_out]
        inner = ["  " + pragma, "  for (int64_t jj = 0; jj < J; ++jj) {", "    const int64_t j = j0 + jj; (void)j;"]
        inner += ["    " + line for line in lines] + ["  }"]
        tail = [f"  ms_f2h_n(ob{k}, y{k} + j0, J);" for k in halves_out]
        return head + inner + tail + ["}"]

    def _span_loop(self, lines, pragma, halves_in, halves_out, tiles):
        """Rows [r0, r1) of L elements as spans of R whole rows: a span of every float16 operand
        converted by one ms_h2f_n / ms_f2h_n, the loop over the span's R * L elements computing in
        float; a row read by every row converted once and repeated to a span's length. The members
        are the same statements as the row loop's, so the bits are the same."""
        head = []
        for k in tiles:
            x = self.group.pointer_inputs[k]
            head.append(f"{compute_type(x.dtype)} tb{k}[{_ROW_SPAN}];")
            if _is_half(x.dtype):
                head.append(f"ms_h2f_n(a{k}, tb{k}, L);")
            else:
                head.append(f"for (int64_t c = 0; c < L; ++c) tb{k}[c] = a{k}[c];")
            head.append(f"for (int64_t w = L; w < R * L; w *= 2) "
                        f"std::memcpy(tb{k} + w, tb{k}, std::min<int64_t>(w, R * L - w) * sizeof(tb{k}[0]));")
        head += ["for (int64_t o0 = r0; o0 < r1; o0 += R) {",
                 "  const int64_t J = std::min<int64_t>(R, r1 - o0) * L, b = o0 * L;"]
        head += [f"  float hb{k}[{_ROW_SPAN}]; ms_h2f_n(a{k} + b, hb{k}, J);" for k in halves_in]
        head += [f"  float ob{k}[{_ROW_SPAN}];" for k in halves_out]
        inner = ["  " + pragma, "  for (int64_t jj = 0; jj < J; ++jj) {", "    const int64_t j = b + jj; (void)j;"]
        inner += ["    " + line for line in lines] + ["  }"]
        tail = [f"  ms_f2h_n(ob{k}, y{k} + b, J);" for k in halves_out]
        return head + inner + tail + ["}"]

    def _span_source(self):
        """The kernel of a layout with short float16 rows (self.spans): tasks of whole spans."""
        rows = ["static inline void ms_rows(int64_t r0, int64_t r1, void** p, const int64_t* n) {",
                "  const int64_t L = n[1];", f"  const int64_t R = {_ROW_SPAN} / L;"]
        rows += ["  " + x for x in self._pointers(lambda k: "") + self._body()] + ["}"]
        kernel = [f'extern "C" void {self.symbol}(void** p, const int64_t* n) {{',
                  "  const int64_t rows = n[0], L = n[1];",
                  f"  const int64_t task = {_ROW_SPAN} / L * 16, tasks = (rows + task - 1) / task;",
                  f"  if (tasks > 1 && rows * L >= {parallel_min(len(self.group.members))}) {{",
                  "    #pragma omp parallel for schedule(static)",
                  "    for (int64_t t = 0; t < tasks; ++t) ms_rows(t * task, std::min(rows, (t + 1) * task), p, n);",
                  "  } else {", "    ms_rows(0, rows, p, n);", "  }", "}"]
        return PRELUDE + "\n".join(rows + kernel) + "\n"

    def _plan_stash(self, loops):
        """Costly values (a transcendental call) needed by several loops of a row: keep a row of them."""
        if self.sizes[-1] > _STASH_MAX:
            return []
        uses = {}
        for targets in loops:
            for m in self._full_members_for(targets):
                uses[id(m)] = uses.get(id(m), 0) + 1
        costly = [m for m in self.group.members if uses.get(id(m), 0) > 1 and "std::" in m.prim.cpp]
        self.stash = {id(m): f"sc{k}" for k, m in enumerate(costly)}
        return [f"{compute_type(m.dtype)} {self.stash[id(m)]}[L];" for m in costly]

    def _inner_size(self):
        return "L"

    def _row_statements(self, ready):
        """Row values (one per row) whose inputs are all ready, in order."""
        emit = _Expressions(self.group, self._ref(False))
        out = []
        for m in self.group.members:
            if id(m) in ready or not self.group.is_row_value(m) or m.prim.kind == "reduce":
                continue
            if all(id(i) in ready or not self.group.is_member(i) for i in m.inputs):
                out.append(emit.statement(m, self.var[id(m)]))
                ready.add(id(m))
        return out

    def _reduction(self, node):
        simd_op, init, combine = _REDUCE[node.prim.name]
        acc_t = _accumulator_type(node)
        acc, var = f"acc_{self.var[id(node)]}", self.var[id(node)]
        x = node.inputs[0]
        value = self._ref(True)(x)
        tail = [combine.format(acc=acc, v=f"static_cast<{acc_t}>({value})")]
        lines = [f"{acc_t} {acc} = {init.format(t=acc_t)};"]
        lines += self._loop([x], tail, f"#pragma omp simd reduction({simd_op}:{acc})")
        total = f"{acc} / static_cast<double>(L)" if node.prim.name == "mean" else acc
        ctype = compute_type(node.dtype)
        expr = round_value(node.dtype, f"static_cast<{ctype}>({total})")
        lines.append(f"const {ctype} {var} = {expr};")
        return lines

    def _stores(self, row_values):
        stores, n_in = [], len(self.group.pointer_inputs)
        for k, (member, dtype) in enumerate(self.group.stores):
            if self.group.is_row_value(member) == row_values and not self.group.is_column_sum(member):
                cls = self.inner[n_in + k]
                if not row_values and cls == 1 and _is_half(dtype):  # converted a chunk at a time
                    stores.append(f"ob{k}[jj] = static_cast<float>({self.var[id(member)]});")
                    continue
                index = "0" if row_values or cls == 0 else ("j" if cls == 1 else f"j * t{k}")
                stores.append(f"y{k}[{index}] = {store_value(dtype, self.var[id(member)])};")
        return stores

    def _full_stores(self):
        return [m for m, _ in self.group.stores if not self.group.is_row_value(m) and
                not self.group.is_column_sum(m)]

    def _column_loops(self):
        """The full-shape loop of one row, storing the full outputs and setting (first row of a
        task) or adding to each column sum's running value, in the sum's type: rows are added one
        after another, as numpy's add.reduce does."""
        group, ref = self.group, self._ref(True)
        first, rest = [], []
        for k, (member, dtype) in enumerate(group.stores):
            if group.is_column_sum(member):  # a contiguous row of partial sums (FusedGroup.source)
                y = f"y{k}[j]"
                value = f"static_cast<{compute_type(dtype)}>({ref(member.inputs[0])})"
                first.append(f"{y} = {store_value(dtype, value)};")
                rest.append(f"{y} = {store_value(dtype, f'{load_value(dtype, y)} + {value}')};")
        targets, stores, stashed = self._full_targets(), self._stores(False), set(self.stashed)
        head = self._loop(targets, stores + first, "#pragma omp simd")
        self.stashed = stashed  # the other branch computes (and stashes) the same values
        tail = self._loop(targets, stores + rest, "#pragma omp simd")
        return ["if (first) {"] + ["  " + x for x in head] + ["} else {"] + ["  " + x for x in tail] + ["}"]

    def _full_targets(self):
        """What the full-shape loop computes: the full outputs and what the column sums add up."""
        return self._full_stores() + [c.inputs[0] for c in self.group.columns]

    def _body(self):
        """Statements for one row (row kernel) or the inner loop (elementwise)."""
        group = self.group
        if group.mode == "columns":
            return self._column_loops()
        if not group.reduce:
            return self._loop(self._full_stores(), self._stores(False), "#pragma omp simd")
        reductions = [m for m in group.members if m.prim.kind == "reduce" and not group.is_column_sum(m)]
        ready = set()
        lines = self._plan_stash([[r.inputs[0]] for r in reductions] + [self._full_targets()])
        for m in reductions:
            lines += self._row_statements(ready)
            lines += self._reduction(m)
            ready.add(id(m))
        lines += self._row_statements(ready)
        if group.columns:
            lines += self._column_loops()
        elif self._full_stores():
            lines += self._loop(self._full_stores(), self._stores(False), "#pragma omp simd")
        return lines + self._stores(True)

    # -- the whole function --------------------------------------------------------------------
    def _pointers(self, offsets):
        lines = []
        for k, x in enumerate(self.group.pointer_inputs):
            t = storage_type(x.dtype)
            lines.append(f"const {t}* a{k} = static_cast<const {t}*>(p[{k}]){offsets(k)};")
            if self.inner[k] == 0:
                # a value the whole loop reads (a learning rate, a loss scale, the all-finite flag)
                # in a local: read through its pointer, the compiler must assume each store of the
                # loop may change it, so it reloaded it every vector and could not take a select on
                # it out of the loop
                lines.append(f"const {t} c{k} = a{k}[0]; (void)c{k};")
            if self.inner[k] == 2:
                lines.append(f"const int64_t s{k} = st[{k * len(self.sizes) + len(self.sizes) - 1}];")
        base, d = len(self.group.pointer_inputs), len(self.sizes)
        for k, (_, dtype) in enumerate(self.group.stores):
            t = storage_type(dtype)
            lines.append(f"{t}* y{k} = static_cast<{t}*>(p[{base + k}]){offsets(base + k)};")
            if self.inner[base + k] == 2:
                lines.append(f"const int64_t t{k} = st[{(base + k) * d + d - 1}];")
        return lines

    def _blocked_source(self, signature):
        """A flat loop in fixed blocks of _BLOCK elements, the blocks shared out between threads: every
        element is computed by the same code (vector body, or scalar tail only at the very end) whatever
        the thread count, so the bits do not depend on it (libmvec's vector erf/exp differ from the scalar
        functions in the last bit). One block as an inlined function called from a parallel and a serial
        loop: an OpenMP `if` clause would also de-vectorise the serial path."""
        def offset(k):
            return {0: "", 1: " + b0", 2: f" + b0 * st[{k}]"}[self.inner[k]]
        block = ["static inline void ms_block(int64_t b0, int64_t L, void** p, const int64_t* n) {",
                 "  const int64_t* st = n + 1; (void)st;"]
        block += ["  " + x for x in self._pointers(offset) + self._body()] + ["}"]
        chunk = f"std::min<int64_t>({_BLOCK}, N - b * {_BLOCK})"
        # Split, each thread takes one contiguous range, its bounds multiples of _SPLIT_ALIGN elements,
        # in blocks of _BLOCK from its start: every block but the very last is a whole number of vectors
        # (and of float16 chunks), so the vector body computes the same elements as in one thread. Whole
        # _BLOCK blocks dealt out in turn left W6's 13-block update 7 : 6 over two threads, and the first
        # thread read an eighth of its gradient from the other core's cache (the product is cut by rows).
        align = _SPLIT_ALIGN
        kernel = [signature, "  const int64_t N = n[0];", f"  const int64_t blocks = (N + {_BLOCK - 1}) / {_BLOCK};",
                  f"  if (N >= {parallel_min(len(self.group.members))}) {{",
                  "    #pragma omp parallel",
                  "    {",
                  "      const int64_t T = omp_get_num_threads(), t = omp_get_thread_num();",
                  f"      const int64_t lo = N * t / T / {align} * {align};",
                  f"      const int64_t hi = t + 1 == T ? N : N * (t + 1) / T / {align} * {align};",
                  f"      for (int64_t b0 = lo; b0 < hi; b0 += {_BLOCK})",
                  f"        ms_block(b0, std::min<int64_t>({_BLOCK}, hi - b0), p, n);",
                  "    }",
                  "  } else {", f"    for (int64_t b = 0; b < blocks; ++b) ms_block(b * {_BLOCK}, {chunk}, p, n);",
                  "  }", "}"]
        return block + kernel

    def source(self):
        if self.spans is not None:
            return self._span_source()
        d = len(self.sizes)
        n_ops = len(self.group.pointer_inputs) + len(self.group.stores)
        head = [f'extern "C" void {self.symbol}(void** p, const int64_t* n) {{',
                f"  const int64_t* st = n + {d};",
                f"  const int64_t L = n[{d - 1}];"]
        if d == 1 and not self.group.reduce and not self.group.columns:
            return PRELUDE + "\n".join(self._blocked_source(head[0])) + "\n"
        rows = " * ".join(f"n[{k}]" for k in range(d - 1)) or "1"
        index = [f"int64_t rem = o;"] + [f"int64_t off{k} = 0;" for k in range(n_ops)]
        for dim in range(d - 2, -1, -1):
            index.append(f"{{ const int64_t i = rem % n[{dim}]; rem /= n[{dim}];")
            index += [f"  off{k} += i * st[{k * d + dim}];" for k in range(n_ops)]
            index.append("}")
        body = index + self._pointers(lambda k: f" + off{k}") + self._body()
        # one row as an inlined function, called from a parallel and a serial loop (an OpenMP `if`
        # clause would still start a one-thread team on every call)
        signature = "int64_t o, bool first, " if self.group.columns else "int64_t o, "
        row = [f"static inline void ms_row({signature}void** p, const int64_t* n) {{"] + head[1:] + \
            ["  " + x for x in body] + ["}"]
        if self.group.columns:  # the threads share out fixed tasks of rows (mstrain.graph.codegen_reduce)
            return PRELUDE + "\n".join(row + row_tasks_kernel(self.group, head[0], rows, len(self.sizes))) + "\n"
        kernel = [head[0], f"  const int64_t L = n[{d - 1}];", f"  const int64_t rows = {rows};",
                  f"  if (rows > 1 && rows * L >= {parallel_min(len(self.group.members))}) {{",
                  "    #pragma omp parallel for schedule(static)",
                  "    for (int64_t o = 0; o < rows; ++o) ms_row(o, p, n);",
                  "  } else {", "    for (int64_t o = 0; o < rows; ++o) ms_row(o, p, n);", "  }", "}"]
        return PRELUDE + "\n".join(row + kernel) + "\n"
