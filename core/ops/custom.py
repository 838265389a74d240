"""`ops.Custom`: user operators in three forms, each a registered primitive that eager mode, the
tracer (graph and sink modes) and autodiff treat as any built-in op.

    square = ops.Custom(lambda x: x * x, out_shape=lambda s: s, out_dtype=lambda t: t, func_type="pyfunc",
                        bprop=lambda x, out, dout: (2 * x * dout,))
    add = ops.Custom(add_rows, func_type="hybrid")                  # a loop DSL compiled to C++
    scale = ops.Custom("scale.cpp:CustomScale", out_shape=lambda s: s, out_dtype=lambda t: t, func_type="aot")

func_type
    "pyfunc"  `func(*numpy arrays) -> array` runs as the op's kernel.
    "hybrid"  `func` is written in the loop DSL of `mstrain.ops.hybrid` (shapes and dtypes come
              from its `output_tensor` calls), compiled once per input ranks and dtypes.
    "aot"     `func` is "file.cpp:symbol" (compiled with the system compiler and cached) or
              "file.so:symbol", with MindSpore's AOT ABI:
              `extern "C" int symbol(int nparam, void** params, int* ndims, int64_t** shapes,
              const char** dtypes, void* stream, void* extra)` — params are the inputs then the
              output, dtypes strings such as "float32"; a non-zero return is an error.

out_shape / out_dtype: the output's shape and dtype, as values or as functions of the inputs'
shapes / dtypes (required for pyfunc and aot). bprop: `bprop(*inputs, out, dout) -> tuple of
input gradients`, written with ops (so it differentiates further); without it, differentiating
the op raises an error naming it. The primitive is named `Custom_<func name>`, as it appears in
IR dumps.
"""
import ctypes
import itertools
import os

import numpy as np

from ..errors import UserError
from .hybrid import HybridKernel
from .primitive import REGISTRY, Primitive, apply

__all__ = ["Custom", "CustomOpError"]

FUNC_TYPES = ("pyfunc", "hybrid", "aot")
_counter = itertools.count()


class CustomOpError(UserError, ValueError):
    """A Custom op is declared or used wrongly (bad func_type, missing shapes, no bprop for grad)."""


def _resolve(spec, inputs, what, name):
    if spec is None:
        raise CustomOpError(f"Custom op {name}: {what} is required for this func_type")
    return spec(*inputs) if callable(spec) else spec


def _aot_function(func, name):
    path, _, symbol = func.rpartition(":")
    if not path or not symbol:
        raise CustomOpError(f"Custom op {name}: an aot func is 'file.cpp:symbol' or 'file.so:symbol', got {func!r}")
    if not os.path.isfile(path):
        raise CustomOpError(f"Custom op {name}: no such file: {path}")
    if path.endswith((".cpp", ".cc", ".cxx")):
        from ..graph import build
        with open(path) as handle:
            path = build.compile_all([handle.read()])[0]
    library = ctypes.CDLL(os.path.abspath(path))
    try:
        function = getattr(library, symbol)
    except AttributeError:
        raise CustomOpError(f"Custom op {name}: {path} has no symbol {symbol!r} (declare it extern \"C\")") from None
    function.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_void_p, ctypes.c_void_p]
    function.restype = ctypes.c_int
    return function


def _call_aot(function, name, arrays, out):
    buffers = [np.ascontiguousarray(a) for a in arrays] + [out]
    count = len(buffers)
    params = (ctypes.c_void_p * count)(*[b.ctypes.data for b in buffers])
    ndims = (ctypes.c_int * count)(*[b.ndim for b in buffers])
    shape_arrays = [np.array(b.shape or (1,), dtype=np.int64) for b in buffers]
    shapes = (ctypes.c_void_p * count)(*[s.ctypes.data for s in shape_arrays])
    dtype_names = [b.dtype.name.encode() for b in buffers]
    dtypes = (ctypes.c_char_p * count)(*dtype_names)
    status = function(count, params, ndims, shapes, dtypes, None, None)
    if status != 0:
        raise CustomOpError(f"Custom op {name}: the aot kernel returned {status}")
    return out


class Custom:
    """A user operator (see the module docstring); call it on Tensors like any op."""

    def __init__(self, func, out_shape=None, out_dtype=None, func_type="hybrid", bprop=None, reg_info=None):
        if func_type not in FUNC_TYPES:
            raise CustomOpError(f"Custom: func_type must be one of {FUNC_TYPES}, got {func_type!r}")
        self.func, self.func_type, self.bprop = func, func_type, bprop
        self.out_shape, self.out_dtype, self.reg_info = out_shape, out_dtype, reg_info
        base = os.path.basename(func).split(":")[-1] if isinstance(func, str) else getattr(func, "__name__", "op")
        base = "lambda" if base == "<lambda>" else base
        self.name = f"Custom_{base}"
        if self.name in REGISTRY:
            self.name = f"{self.name}_{next(_counter)}"
        self._kernel = self._make_kernel()
        self.primitive = self._register()

    def _make_kernel(self):
        if self.func_type == "hybrid":
            if not callable(self.func):
                raise CustomOpError(f"Custom op {self.name}: a hybrid func is a Python function")
            return HybridKernel(self.func)
        if self.func_type == "aot":
            function = _aot_function(self.func, self.name)
            return lambda *arrays: _call_aot(function, self.name, arrays, self._empty_output(arrays))
        if not callable(self.func):
            raise CustomOpError(f"Custom op {self.name}: a pyfunc func is a Python function")
        return self._run_pyfunc

    def _empty_output(self, arrays):
        shape = _resolve(self.out_shape, [a.shape for a in arrays], "out_shape", self.name)
        dtype = _resolve(self.out_dtype, [a.dtype for a in arrays], "out_dtype", self.name)
        return np.zeros(tuple(shape), dtype=np.dtype(getattr(dtype, "name", dtype)))

    def _run_pyfunc(self, *arrays):
        expected = self._empty_output(arrays)
        result = np.asarray(self.func(*arrays))
        if result.shape != expected.shape:
            raise CustomOpError(f"Custom op {self.name}: func returned shape {result.shape}, out_shape says "
                                f"{expected.shape}")
        return result.astype(expected.dtype, copy=False)

    def _register(self):
        kernel = self._kernel

        def impl(*arrays):
            return kernel(*arrays)

        impl.__doc__ = getattr(self.func, "__doc__", None)
        impl.__module__ = getattr(self.func, "__module__", None) or "custom"  # the user's op, not core's
        primitive = Primitive(self.name, impl, kind="opaque", differentiable=True)
        primitive.vjp = self._vjp
        REGISTRY[self.name] = primitive
        return primitive

    def _vjp(self, ctx, dout):
        if self.bprop is None:
            raise CustomOpError(f"Custom op {self.name} has no bprop: pass Custom(..., bprop=fn) with "
                                "fn(*inputs, out, dout) -> input gradients to differentiate it")
        grads = self.bprop(*ctx.inputs, ctx.out, dout)
        return tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)

    def __call__(self, *inputs):
        return apply(self.primitive, *inputs)

    def __repr__(self):
        return f"Custom({self.name}, func_type={self.func_type!r})"
