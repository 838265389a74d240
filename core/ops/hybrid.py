"""The hybrid DSL of `ops.Custom(func_type="hybrid")`: a Python function of loops over tensors,
compiled to C++ by the same compiler and disk cache as the fused kernels.

    def add_rows(a, b):
        out = output_tensor(a.shape, a.dtype)
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                out[i, j] = a[i, j] + b[j]
        return out

What the body may contain (MindSpore's hybrid subset): `output_tensor(shape, dtype)` (one or more,
returned at the end), `for v in range(stop)` / `range(start, stop[, step])`, `if` / `else`,
assignments to output elements (`=`, `+=`, ...) and to local scalars (typed by their first
value, visible in the block that assigns them first, as in C++), reads `x[i, j]` of inputs and
outputs, `x.shape[k]`, arithmetic, comparisons, `and` / `or` / `not`, conditional expressions,
and the math functions `exp log sqrt sin cos tan tanh abs fabs floor ceil pow max min float int`.
Anything else raises `HybridSyntaxError` naming the user's file and line.

Kernels are specialised on the inputs' ranks and dtypes (not on their sizes: shapes are passed at
run time), so one compile serves every batch size. The C ABI is
`void kernel(void** buffers, const int64_t* shapes)`: inputs then outputs, shapes of each buffer
concatenated.
"""
import ast
import ctypes
import inspect
import textwrap

import numpy as np

from ..errors import UserError

__all__ = ["HybridSyntaxError", "HybridKernel"]

_CTYPES = {"float32": "float", "float64": "double", "int32": "int32_t", "int64": "int64_t", "int8": "int8_t",
           "int16": "int16_t", "uint8": "uint8_t", "bool": "bool", "float16": "_Float16"}
_MATH = {"exp": "std::exp", "log": "std::log", "sqrt": "std::sqrt", "sin": "std::sin", "cos": "std::cos",
         "tan": "std::tan", "tanh": "std::tanh", "abs": "std::abs", "fabs": "std::fabs", "floor": "std::floor",
         "ceil": "std::ceil", "pow": "std::pow", "max": "std::max", "min": "std::min"}
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Mod: "%", ast.BitAnd: "&",
           ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}
_COMPARES = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class HybridSyntaxError(UserError, SyntaxError):
    """A hybrid function uses Python the DSL does not translate (names the user's file and line)."""


class _Source:
    """The user's function: its AST, and where each line lives for error messages."""

    def __init__(self, func):
        self.func = func
        try:
            lines, self.first_line = inspect.getsourcelines(func)
        except (OSError, TypeError):
            raise HybridSyntaxError(f"hybrid function {getattr(func, '__name__', func)!r}: its source cannot be "
                                    "read (define it with def in a file)") from None
        self.file = inspect.getsourcefile(func) or "<unknown>"
        tree = ast.parse(textwrap.dedent("".join(lines)))
        self.node = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
        self.params = [a.arg for a in self.node.args.args]

    def error(self, node, message):
        line = self.first_line + getattr(node, "lineno", 1) - 1
        return HybridSyntaxError(f"{self.file}:{line}: hybrid function {self.func.__name__}: {message}")


class _Translator:
    """AST -> C++ statements for one specialisation (input ranks and dtypes)."""

    def __init__(self, source, ranks, dtypes):
        self.src = source
        self.ranks = dict(zip(source.params, ranks))
        self.dtypes = dict(zip(source.params, dtypes))
        self.outputs = []          # names of output tensors in creation order
        self.output_specs = {}     # name -> (shape AST nodes, dtype AST node)
        self.scalars = set()
        self.lines = []

    # -- expressions -----------------------------------------------------------------------------
    def expr(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
            value = node.value
            return ("true" if value else "false") if isinstance(value, bool) else repr(value)
        if isinstance(node, ast.Name):
            if node.id in self.scalars or node.id in self.ranks or node.id in self.output_specs:
                if node.id in self.ranks and self.ranks[node.id] > 0:
                    raise self.src.error(node, f"'{node.id}' is a tensor: index it ({node.id}[i, ...])")
                return node.id if node.id not in self.ranks else f"{node.id}[0]"
            raise self.src.error(node, f"unknown name '{node.id}'")
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left), self.expr(node.right)
            if isinstance(node.op, ast.Pow):
                return f"std::pow((double)({left}), (double)({right}))"
            if isinstance(node.op, ast.FloorDiv):
                return f"((int64_t)std::floor((double)({left}) / (double)({right})))"
            if type(node.op) not in _BINOPS:
                raise self.src.error(node, f"operator {type(node.op).__name__} is not supported")
            if isinstance(node.op, ast.Div):
                return f"((double)({left}) / (double)({right}))"
            return f"({left} {_BINOPS[type(node.op)]} {right})"
        if isinstance(node, ast.UnaryOp):
            operand = self.expr(node.operand)
            symbol = {ast.USub: "-", ast.UAdd: "+", ast.Not: "!"}.get(type(node.op))
            if symbol is None:
                raise self.src.error(node, f"unary {type(node.op).__name__} is not supported")
            return f"({symbol}{operand})"
        if isinstance(node, ast.BoolOp):
            joiner = " && " if isinstance(node.op, ast.And) else " || "
            return "(" + joiner.join(self.expr(v) for v in node.values) + ")"
        if isinstance(node, ast.Compare):
            parts, left = [], node.left
            for op, right in zip(node.ops, node.comparators):
                if type(op) not in _COMPARES:
                    raise self.src.error(node, f"comparison {type(op).__name__} is not supported")
                parts.append(f"({self.expr(left)} {_COMPARES[type(op)]} {self.expr(right)})")
                left = right
            return "(" + " && ".join(parts) + ")"
        if isinstance(node, ast.IfExp):
            return f"({self.expr(node.test)} ? {self.expr(node.body)} : {self.expr(node.orelse)})"
        if isinstance(node, ast.Subscript):
            return self.element(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Attribute):
            raise self.src.error(node, f"attribute '{node.attr}' is not supported (only x.shape[k])")
        raise self.src.error(node, f"{type(node).__name__} is not supported in a hybrid function")

    def call(self, node):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        args = [self.expr(a) for a in node.args]
        if name in ("float",):
            return f"((double)({args[0]}))"
        if name in ("int",):
            return f"((int64_t)({args[0]}))"
        if name in ("max", "min") and len(args) == 2:
            return f"{_MATH[name]}((double)({args[0]}), (double)({args[1]}))"
        if name in _MATH:
            cast = ", ".join(f"(double)({a})" for a in args)
            return f"{_MATH[name]}({cast})"
        raise self.src.error(node, f"call of '{ast.unparse(node.func)}' is not supported")

    def shape_of(self, node):
        """`x.shape[k]` -> the run-time extent; None when `node` is not of that form."""
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
                and isinstance(node.value.value, ast.Name)):
            tensor = node.value.value.id
            if tensor not in self.ranks and tensor not in self.output_specs:
                raise self.src.error(node, f"'{tensor}' is not a tensor")
            k = node.slice.value if isinstance(node.slice, ast.Constant) else None
            if not isinstance(k, int):
                raise self.src.error(node, "x.shape[k] needs a constant k")
            return f"shape_{tensor}[{k}]"
        return None

    def element(self, node):
        extent = self.shape_of(node)
        if extent is not None:
            return extent
        if not isinstance(node.value, ast.Name):
            raise self.src.error(node, "only tensors named by a variable can be indexed")
        tensor = node.value.id
        rank = self.ranks.get(tensor, len(self.output_specs.get(tensor, ((),))[0]) if tensor in self.output_specs else None)
        if rank is None:
            raise self.src.error(node, f"'{tensor}' is not a tensor")
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if len(index) != rank:
            raise self.src.error(node, f"'{tensor}' has {rank} axes, indexed with {len(index)}")
        if any(isinstance(i, ast.Slice) for i in index):
            raise self.src.error(node, "slices are not supported: index every axis with a scalar")
        offset = "0"
        for axis, item in enumerate(index):
            offset = f"({offset}) * shape_{tensor}[{axis}] + ({self.expr(item)})"
        return f"{tensor}[{offset}]"

    # -- statements ------------------------------------------------------------------------------
    def body(self, statements, indent):
        for statement in statements:
            self.statement(statement, indent)

    def emit(self, indent, text):
        self.lines.append("    " * indent + text)

    def statement(self, node, indent):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring
        if isinstance(node, ast.Assign):
            return self.assign(node, indent)
        if isinstance(node, ast.AugAssign):
            if type(node.op) not in _BINOPS:
                raise self.src.error(node, f"operator {type(node.op).__name__}= is not supported")
            target = self.target(node.target, create=False)
            return self.emit(indent, f"{target} {_BINOPS[type(node.op)]}= {self.expr(node.value)};")
        if isinstance(node, ast.For):
            return self.loop(node, indent)
        if isinstance(node, ast.If):
            self.emit(indent, f"if ({self.expr(node.test)}) {{")
            self.body(node.body, indent + 1)
            if node.orelse:
                self.emit(indent, "} else {")
                self.body(node.orelse, indent + 1)
            return self.emit(indent, "}")
        if isinstance(node, ast.Return):
            return None  # outputs are the output tensors, in creation order
        if isinstance(node, ast.Pass):
            return None
        raise self.src.error(node, f"{type(node).__name__} statements are not supported in a hybrid function")

    def assign(self, node, indent):
        if len(node.targets) != 1:
            raise self.src.error(node, "one target per assignment")
        target = node.targets[0]
        value = node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "output_tensor":
            if not isinstance(target, ast.Name) or len(value.args) != 2:
                raise self.src.error(node, "write `name = output_tensor(shape, dtype)`")
            shape = value.args[0]
            dims = (self._shape_dims(shape))
            self.output_specs[target.id] = (dims, value.args[1])
            self.outputs.append(target.id)
            return None
        self.emit(indent, f"{self.target(target, create=True)} = {self.expr(value)};")

    def _shape_dims(self, shape):
        if isinstance(shape, (ast.Tuple, ast.List)):
            return list(shape.elts)
        if isinstance(shape, ast.Attribute) and shape.attr == "shape" and isinstance(shape.value, ast.Name):
            name = shape.value.id
            rank = self.ranks.get(name)
            if rank is None:
                raise self.src.error(shape, f"'{name}' is not an input tensor")
            return [ast.copy_location(ast.Subscript(value=shape, slice=ast.Constant(k), ctx=ast.Load()), shape)
                    for k in range(rank)]
        raise self.src.error(shape, "an output shape is a tuple of extents or an input's .shape")

    def target(self, node, create):
        if isinstance(node, ast.Subscript):
            if not isinstance(node.value, ast.Name) or node.value.id not in self.output_specs:
                raise self.src.error(node, "only output tensors can be written")
            return self.element(node)
        if isinstance(node, ast.Name):
            if node.id in self.ranks or node.id in self.output_specs:
                raise self.src.error(node, f"'{node.id}' is a tensor: write its elements ({node.id}[i] = ...)")
            if node.id not in self.scalars:
                if not create:
                    raise self.src.error(node, f"'{node.id}' is used before it is assigned")
                self.scalars.add(node.id)
                return f"auto {node.id}"
            return node.id
        raise self.src.error(node, f"cannot assign to {type(node).__name__}")

    def loop(self, node, indent):
        if node.orelse or not isinstance(node.target, ast.Name):
            raise self.src.error(node, "write `for i in range(...)` with a plain loop variable and no else")
        call = node.iter
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("range", "serial",
                                                                                                    "parallel")):
            raise self.src.error(node, "loops run over range(...)")
        args = [self.expr(a) for a in call.args]
        if not 1 <= len(args) <= 3:
            raise self.src.error(node, "range takes 1 to 3 arguments")
        start, stop, step = (["0"] + args + ["1"])[:3] if len(args) == 1 else (args + ["1"])[:3]
        var = node.target.id
        self.scalars.add(var)
        self.emit(indent, f"for (int64_t {var} = {start}; ({step}) > 0 ? {var} < ({stop}) : {var} > ({stop}); "
                          f"{var} += ({step})) {{")
        self.body(node.body, indent + 1)
        self.emit(indent, "}")
        self.scalars.discard(var)


class HybridKernel:
    """One hybrid function, compiled per (input ranks, dtypes) on first use; callable on arrays."""

    def __init__(self, func):
        self.source = _Source(func)
        self.name = func.__name__
        self._compiled = {}

    def _specialise(self, arrays):
        key = tuple((a.ndim, a.dtype.name) for a in arrays)
        if key not in self._compiled:
            self._compiled[key] = self._build(arrays)
        return self._compiled[key]

    def _build(self, arrays):
        from ..graph import build
        translator = _Translator(self.source, [a.ndim for a in arrays], [a.dtype.name for a in arrays])
        translator.body(self.source.node.body, 1)
        if not translator.outputs:
            raise self.source.error(self.source.node, "no output_tensor(...) is created")
        params = self.source.params
        decls, offset = [], 0
        names = params + translator.outputs
        out_dtypes = [self._output_dtype(translator, name, arrays) for name in translator.outputs]
        dtypes = [a.dtype.name for a in arrays] + out_dtypes
        ranks = [a.ndim for a in arrays] + [len(translator.output_specs[n][0]) for n in translator.outputs]
        for k, (name, dtype, rank) in enumerate(zip(names, dtypes, ranks)):
            if dtype not in _CTYPES:
                raise self.source.error(self.source.node, f"dtype {dtype} of '{name}' is not supported")
            decls.append(f"    {_CTYPES[dtype]}* {name} = ({_CTYPES[dtype]}*)buffers[{k}];")
            decls.append(f"    const int64_t* shape_{name} = shapes + {offset};")
            offset += max(rank, 1)
        symbol = f"hybrid_{self.name}"
        code = "\n".join(["#include <cmath>", "#include <cstdint>", "#include <algorithm>",
                          f'extern "C" void {symbol}(void** buffers, const int64_t* shapes) {{', *decls,
                          *translator.lines, "}", ""])
        path = build.compile_all([code])[0]
        function = getattr(ctypes.CDLL(path), symbol)
        function.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        function.restype = None
        return function, translator, out_dtypes, code

    def _output_dtype(self, translator, name, arrays):
        node = translator.output_specs[name][1]
        env = dict(zip(self.source.params, arrays))
        try:
            value = eval(compile(ast.fix_missing_locations(ast.Expression(node)), "<dtype>", "eval"),  # noqa: S307
                         {"np": np, "numpy": np}, env)
        except Exception as exc:
            raise self.source.error(node, f"cannot evaluate the dtype of '{name}' ({exc})") from None
        return np.dtype(getattr(value, "name", value) if not isinstance(value, np.dtype) else value).name

    def output_shapes(self, arrays):
        """The shapes of the outputs for these inputs (evaluated from the output_tensor calls)."""
        translator = self._specialise(arrays)[1]
        env = dict(zip(self.source.params, arrays))
        shapes = []
        for name in translator.outputs:
            dims = translator.output_specs[name][0]
            try:
                shapes.append(tuple(int(eval(compile(ast.fix_missing_locations(ast.Expression(d)),  # noqa: S307
                                                             "<shape>", "eval"), {}, env)) for d in dims))
            except Exception as exc:
                raise self.source.error(dims[0] if dims else self.source.node,
                                        f"cannot evaluate the shape of '{name}' ({exc})") from None
        return shapes

    def source_code(self, arrays):
        """The generated C++ for these inputs' ranks and dtypes."""
        return self._specialise(arrays)[3]

    def __call__(self, *arrays):
        arrays = [np.ascontiguousarray(a) for a in arrays]
        if len(arrays) != len(self.source.params):
            raise TypeError(f"hybrid {self.name} takes {len(self.source.params)} inputs, got {len(arrays)}")
        function, _, out_dtypes, _ = self._specialise(arrays)
        outputs = [np.zeros(shape, dtype) for shape, dtype in zip(self.output_shapes(arrays), out_dtypes)]
        buffers = arrays + outputs
        pointers = (ctypes.c_void_p * len(buffers))(*[b.ctypes.data for b in buffers])
        shapes = np.array([d for b in buffers for d in (b.shape or (1,))], dtype=np.int64)
        function(pointers, shapes.ctypes.data)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
