"""Generated C++ for a reduction over any axes (bias gradients, a mean over a batch): the offset
tables of the reduced and kept elements, and the kernel source (rows accumulated in numpy's order
when the reduced axes lead, float16 storage summed in float32). Shares the code generator's
prelude, value loads/stores and thread blocks (mstrain.graph.codegen_c). Also the thread tasks of
kernels with column sums (sums over every axis but the last computed with their input)."""
import numpy as np

from .codegen_c import (PRELUDE, _COLUMN_BLOCK, _PARALLEL_MIN, _is_half, compute_type, load_value, parallel_min,
                        storage_type, store_value)

# Rows per task of a kernel with column sums: each task adds its rows in order into partial sums of
# its own, which are then added in task order (numpy's order up to one task). Tasks of whole rows
# keep the row loops and the memory reads contiguous (tasks of columns read every row in pieces).
_COLUMN_ROWS = 256


def reduction_tables(x, axes):
    """(leading, kept offsets, reduced offsets) in elements of `x`: every output reads
    x[kept offset + reduced offset] over the reduced offsets; `leading` when all reduced axes
    come before the kept ones (then rows of the output accumulate, as numpy does)."""
    kept = [d for d in range(x.ndim) if d not in axes]
    reduced = sorted(axes)

    def offsets(dims):
        table = np.zeros(1, np.int64)
        for d in dims:
            steps = np.arange(x.shape[d], dtype=np.int64) * (x.strides[d] // x.itemsize)
            table = (table[:, None] + steps[None, :]).ravel()
        return table
    leading = bool(reduced) and bool(kept) and max(reduced) < min(kept)
    return leading, offsets(kept), offsets(reduced)


def _half_leading_reduction(name, combine):
    """A float16 reduction over leading axes with contiguous rows: the running values stay in float
    (each rounded to float16 precision as storing it would), the rows converted a block at a time
    by ms_h2f_n: numpy's row-after-row float16 additions without a conversion per element and row."""
    step = combine.format(a="acc[k]", v="row[k]")
    lines = ["  for (int64_t k0 = 0; k0 < nk; k0 += 1024) {",
             "    const int64_t K = std::min<int64_t>(1024, nk - k0);",
             "    float acc[1024], row[1024];",
             "    ms_h2f_n(x + ro[0] + k0, acc, K);",
             "    for (int64_t r = 1; r < nr; ++r) {",
             "      ms_h2f_n(x + ro[r] + k0, row, K);",
             "      #pragma omp simd",
             f"      for (int64_t k = 0; k < K; ++k) acc[k] = ms_round_half({step});",
             "    }"]
    if name == "mean":  # numpy divides by the count as an integer: in double, then rounds
        lines += ["    for (int64_t k = 0; k < K; ++k)",
                  "      acc[k] = static_cast<float>(static_cast<double>(acc[k]) / static_cast<double>(nr));"]
    return lines + ["    ms_f2h_n(acc, y + k0, K);", "  }"]


def _leading_reduction(head, unpack, name, load, combine, ct, y_dtype):
    """Rows of x accumulated into y in row order (numpy's order), over columns [k0, k1). Columns are
    independent, so fixed blocks of _COLUMN_BLOCK columns are shared out between threads and every
    output keeps numpy's bits whatever the thread count (a bias gradient: 2048 rows of 256)."""
    columns = ["static inline void ms_columns(void** p, const int64_t* n, int64_t k0, int64_t k1) {"]
    columns += [head[1], head[2]] + unpack
    columns += ["  { const int64_t r0 = ro[0];", "    #pragma omp simd",
                f"    for (int64_t k = k0; k < k1; ++k) y[k] = {store_value(y_dtype, load)}; }}",
                "  for (int64_t r = 1; r < nr; ++r) {", "    const int64_t r0 = ro[r];", "    #pragma omp simd",
                "    for (int64_t k = k0; k < k1; ++k)",
                "      y[k] = {};".format(store_value(y_dtype, combine.format(
                    a=f"static_cast<{ct}>({load_value(y_dtype, 'y[k]')})", v=f"static_cast<{ct}>({load})"))),
                "  }"]
    if name == "mean":  # numpy divides by the count as an integer: in double, then rounds
        mean = f"static_cast<double>({load_value(y_dtype, 'y[k]')}) / static_cast<double>(nr)"
        columns += ["  for (int64_t k = k0; k < k1; ++k)", f"    y[k] = {store_value(y_dtype, mean)};"]
    columns += ["  (void)ko;", "}"]
    blocks = f"(nk + {_COLUMN_BLOCK - 1}) / {_COLUMN_BLOCK}"
    kernel = [head[0], "  const int64_t nk = n[0], nr = n[1];", f"  const int64_t blocks = {blocks};",
              f"  if (blocks > 1 && nk * nr >= {_PARALLEL_MIN}) {{", "    #pragma omp parallel for schedule(static)",
              "    for (int64_t b = 0; b < blocks; ++b)",
              f"      ms_columns(p, n, b * {_COLUMN_BLOCK}, std::min<int64_t>(nk, (b + 1) * {_COLUMN_BLOCK}));",
              "  } else {", "    ms_columns(p, n, 0, nk);", "  }", "}"]
    return columns + kernel


def reduction_source(node, leading, kept_contiguous):
    """A kernel reducing p[0] into p[1] over the offset tables in params (see reduction_tables).

    Leading axes (a bias gradient: sum over the batch) accumulate row after row into the output,
    in its dtype, as numpy does; trailing axes accumulate each output in double (float inputs).
    """
    name = node.prim.name
    x_t, y_t = storage_type(node.inputs[0].dtype), storage_type(node.dtype)
    ct = compute_type(node.dtype)
    combine = {"sum": "{a} + {v}", "mean": "{a} + {v}", "max": "std::max({a}, {v})", "min": "std::min({a}, {v})"}[name]
    load = "x[r0 + " + ("k" if kept_contiguous else "ko[k]") + "]"
    lines = ['extern "C" void ms_kernel(void** p, const int64_t* n) {',
             f"  const {x_t}* x = static_cast<const {x_t}*>(p[0]);",
             f"  {y_t}* y = static_cast<{y_t}*>(p[1]);",
             "  const int64_t nk = n[0], nr = n[1];",
             "  const int64_t* ko = n + 2;", "  const int64_t* ro = n + 2 + nk;"]
    x_dtype, y_dtype = node.inputs[0].dtype, node.dtype
    load = load_value(x_dtype, load)
    if leading and kept_contiguous and _is_half(x_dtype) and _is_half(y_dtype):
        lines += _half_leading_reduction(name, combine)
    elif leading:
        return PRELUDE + "\n".join(_leading_reduction(lines[:3], lines[3:], name, load, combine, ct, y_dtype)) + "\n"
    else:
        acc_t = "double" if np.dtype(node.dtype).kind == "f" and name in ("sum", "mean") else ct
        init = {"sum": "0", "mean": "0", "max": f"-std::numeric_limits<{acc_t}>::infinity()",
                "min": f"std::numeric_limits<{acc_t}>::infinity()"}[name]
        value = load_value(x_dtype, "x[k0 + ro[r]]")
        total = "acc / static_cast<double>(nr)" if name == "mean" else "acc"
        lines += ["  for (int64_t k = 0; k < nk; ++k) {", f"    const int64_t k0 = ko[k];",
                  f"    {acc_t} acc = {init};",
                  "    for (int64_t r = 0; r < nr; ++r)",
                  f"      acc = {combine.format(a='acc', v=f'static_cast<{acc_t}>({value})')};",
                  f"    y[k] = {store_value(y_dtype, total)};",
                  "  }"]
    return PRELUDE + "\n".join(lines + ["}"]) + "\n"


def row_tasks_kernel(group, head, rows, d):
    """A kernel with column sums (elementwise or a row kernel): fixed tasks of _COLUMN_ROWS rows
    (shared out between threads) each add their rows in order into partial sums of their own (a
    (tasks, L) scratch array per sum, after the stores), pointed to in place of the sums' outputs;
    the partial sums are then added task after task. The bits do not depend on the thread count,
    and up to one task they are numpy's."""
    n_ptr = len(group.pointer_inputs) + len(group.stores)
    sums = [k for k, (m, _) in enumerate(group.stores) if group.is_column_sum(m)]
    point, combine = [], []
    for scratch, k in enumerate(sums, n_ptr):
        slot, dtype = len(group.pointer_inputs) + k, group.stores[k][1]
        t = storage_type(dtype)
        point.append(f"    q[{slot}] = static_cast<{t}*>(p[{scratch}]) + c * L;")
        total = store_value(dtype, f"{load_value(dtype, 'y[j]')} + {load_value(dtype, 's[c * L + j]')}")
        combine += [f"  {{ {t}* y = static_cast<{t}*>(p[{slot}]);",
                    f"    const {t}* s = static_cast<const {t}*>(p[{scratch}]);",
                    "    for (int64_t j = 0; j < L; ++j) y[j] = s[j];",
                    "    for (int64_t c = 1; c < tasks; ++c)",
                    f"      for (int64_t j = 0; j < L; ++j) y[j] = {total};", "  }"]
    return [head, f"  const int64_t L = n[{d - 1}];", f"  const int64_t rows = {rows};",
            f"  const int64_t tasks = (rows + {_COLUMN_ROWS - 1}) / {_COLUMN_ROWS};",
            "  auto task = [&](int64_t c) {", f"    void* q[{n_ptr}];",
            f"    for (int k = 0; k < {n_ptr}; ++k) q[k] = p[k];"] + point + [
            f"    const int64_t o0 = c * {_COLUMN_ROWS}, o1 = std::min<int64_t>(rows, o0 + {_COLUMN_ROWS});",
            "    for (int64_t o = o0; o < o1; ++o) ms_row(o, o == o0, q, n);", "  };",
            f"  if (tasks > 1 && rows * L >= {parallel_min(len(group.members))}) {{",
            "    #pragma omp parallel for schedule(static)",
            "    for (int64_t c = 0; c < tasks; ++c) task(c);",
            "  } else {", "    for (int64_t c = 0; c < tasks; ++c) task(c);", "  }"] + combine + ["}"]
