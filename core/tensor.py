"""Tensor and Parameter: a numpy array with a place in the autodiff tape."""
import itertools

import numpy as np

from . import dtype as _dtype


def _note_half(array):
    """A float16 Tensor exists: eager dispatch computes float16 elementwise ops in float32 from now
    on (mstrain.ops.half_dispatch)."""
    if getattr(array, "dtype", None) == np.float16:
        from .ops.half_dispatch import enable
        enable()


def _to_array(data, dtype):
    if isinstance(data, Tensor):
        array = data._data
    elif isinstance(data, np.ndarray):
        array = data
    else:
        array = np.asarray(data)
        if dtype is None and array.dtype == np.float64:
            array = array.astype(np.float32)  # Python floats become float32, as in MindSpore
    if dtype is not None:
        dtype = _dtype.as_dtype(dtype)
        if _dtype.is_bfloat16(dtype):
            return _dtype.to_bfloat16(array)
        if array.dtype != dtype:
            array = array.astype(dtype)
    return array


class Tensor:
    """An n-dimensional array. Operators follow numpy broadcasting and are differentiable.

    >>> t = Tensor([[1.0, 2.0]]) * 3
    >>> t.asnumpy().tolist(), t.dtype
    ([[3.0, 6.0]], dtype('float32'))
    """

    __slots__ = ("_data", "_node", "_index", "__weakref__")
    __array_priority__ = 1000  # numpy defers `ndarray op Tensor` to Tensor's reflected operator

    def __init__(self, input_data=None, dtype=None, shape=None, init=None):
        if input_data is None:
            if shape is None:
                raise ValueError("Tensor needs input_data or shape")
            if any(d is None or d == -1 for d in shape):  # a dynamic-shape placeholder (Cell.set_inputs)
                from .graph.dynamic import Placeholder
                self._data = Placeholder(shape, _dtype.as_dtype(dtype) or np.float32)
                self._node, self._index = None, 0
                return
            if init is not None:  # MindSpore fills on first use; filling now gives the same values
                from .common.initializer import initializer
                input_data = initializer(init, shape, _dtype.as_dtype(dtype) or np.float32)._data
            else:
                input_data = np.zeros(shape, dtype=_dtype.as_dtype(dtype) or np.float32)
        elif init is not None:
            raise ValueError("Tensor: give either input_data or (shape, dtype, init), not both")
        self._data = _to_array(input_data, dtype)
        self._node = None
        self._index = 0
        _note_half(self._data)

    @classmethod
    def _wrap(cls, array):
        """Fast construction from a kernel's output (no validation, no copy)."""
        t = object.__new__(Tensor)
        # a graph tracer's placeholder (mstrain.graph.trace._Traced) is kept as it is
        t._data = array if type(array) is np.ndarray or hasattr(type(array), "_mstrain_traced") else np.asarray(array)
        t._node = None
        t._index = 0
        return t

    def init_data(self):
        """MindSpore's lazy-initialisation hook; values are filled at construction here."""
        return self

    # -- numpy interop ------------------------------------------------------------------------
    def asnumpy(self):
        """The underlying array (shared memory, as PyTorch's .numpy())."""
        data = self._data
        return data if type(data) is np.ndarray else np.asarray(data)  # a traced tensor raises here

    def __array__(self, dtype=None, copy=None):
        return self._data if dtype is None else self._data.astype(dtype)

    def item(self):
        return self._data.item()

    def tolist(self):
        return self._data.tolist()

    def __float__(self):
        return float(self._data)

    def __int__(self):
        return int(self._data)

    def __bool__(self):
        return bool(self._data)

    def __index__(self):
        return int(self._data)

    # -- metadata -----------------------------------------------------------------------------
    @property
    def shape(self):
        return self._data.shape

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def size(self):
        return self._data.size

    @property
    def nbytes(self):
        return self._data.nbytes

    def __len__(self):
        if not self._data.ndim:
            raise TypeError("len() of a 0-d Tensor")
        return self._data.shape[0]

    def __repr__(self):
        body = np.array2string(self._data, separator=", ", prefix="Tensor(")
        return f"Tensor({body}, dtype={self._data.dtype})"

    __str__ = __repr__

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __hash__(self):
        return id(self)

    # -- differentiable methods (defined in ops; bound below) ---------------------------------
    def __add__(self, other): return _F.add(self, other)
    def __radd__(self, other): return _F.add(other, self)
    def __sub__(self, other): return _F.sub(self, other)
    def __rsub__(self, other): return _F.sub(other, self)
    def __mul__(self, other): return _F.mul(self, other)
    def __rmul__(self, other): return _F.mul(other, self)
    def __truediv__(self, other): return _F.div(self, other)
    def __rtruediv__(self, other): return _F.div(other, self)
    def __floordiv__(self, other): return _F.floor_div(self, other)
    def __mod__(self, other): return _F.mod(self, other)
    def __pow__(self, other): return _F.pow(self, other)
    def __rpow__(self, other): return _F.pow(other, self)
    def __matmul__(self, other): return _F.matmul(self, other)
    def __rmatmul__(self, other): return _F.matmul(other, self)
    def __neg__(self): return _F.neg(self)
    def __pos__(self): return self
    def __abs__(self): return _F.abs(self)
    def __lt__(self, other): return _F.less(self, other)
    def __le__(self, other): return _F.less_equal(self, other)
    def __gt__(self, other): return _F.greater(self, other)
    def __ge__(self, other): return _F.greater_equal(self, other)
    def __eq__(self, other): return _F.equal(self, other)
    def __ne__(self, other): return _F.not_equal(self, other)
    def __and__(self, other): return _F.logical_and(self, other)
    def __or__(self, other): return _F.logical_or(self, other)
    def __invert__(self): return _F.logical_not(self)
    def __getitem__(self, index): return _F.getitem(self, index)

    def __setitem__(self, index, value):
        """In-place write (not differentiable), as MindSpore's Tensor.__setitem__."""
        self._data[index] = value._data if isinstance(value, Tensor) else value

    @property
    def T(self): return _F.transpose(self)
    def astype(self, dtype): return _F.cast(self, dtype)
    def to(self, dtype): return _F.cast(self, dtype)
    def float(self): return _F.cast(self, _dtype.float32)
    def reshape(self, *shape): return _F.reshape(self, shape[0] if len(shape) == 1 else shape)
    def view(self, *shape): return self.reshape(*shape)
    def transpose(self, *axes): return _F.transpose(self, axes[0] if len(axes) == 1 else (axes or None))
    def swapaxes(self, a, b): return _F.swapaxes(self, a, b)
    def expand_dims(self, axis): return _F.expand_dims(self, axis)
    def squeeze(self, axis=None): return _F.squeeze(self, axis)
    def flatten(self): return _F.reshape(self, (-1,))
    def broadcast_to(self, shape): return _F.broadcast_to(self, shape)
    def sum(self, axis=None, keepdims=False): return _F.sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return _F.mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return _F.max(self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return _F.min(self, axis, keepdims)
    def argmax(self, axis=None): return _F.argmax(self, axis)
    def exp(self): return _F.exp(self)
    def log(self): return _F.log(self)
    def sqrt(self): return _F.sqrt(self)
    def abs(self): return _F.abs(self)

    def copy(self):
        return Tensor(self._data.copy())

    def stop_gradient(self):
        return Tensor._wrap(self._data)

    def assign_value(self, value):
        """Replace the contents in place (shape and dtype kept)."""
        np.copyto(self._data, value._data if isinstance(value, Tensor) else value, casting="same_kind")
        _dtype.round_bfloat16_writes((self._data,))
        return self


_names = itertools.count()


class Parameter(Tensor):
    """A trainable tensor of a Cell. Its gradient is collected at its own leaf of the tape.

    `name` is filled in by the owning Cell (its dotted path) when not given.
    """

    __slots__ = ("name", "requires_grad", "parallel_optimizer", "layout")

    def __init__(self, default_input, name=None, requires_grad=True, parallel_optimizer=True):
        super().__init__(default_input)
        data = self._data
        if not (data.flags.writeable and data.flags.owndata and data.flags.c_contiguous):
            # A Parameter owns C-ordered storage: optimizers update it in place, and a strided
            # (e.g. transposed) buffer makes every in-place update several times slower.
            self._data = np.array(data, order="C", copy=True)
        self.name = name if name is not None else f"Parameter{next(_names)}"
        self.requires_grad = requires_grad
        self.parallel_optimizer = parallel_optimizer
        self.layout = None
        if requires_grad:
            _autograd.make_leaf(self)

    @property
    def data(self):
        return self

    def set_data(self, data):
        """Replace the value (the shape may change, e.g. when loading a resharded checkpoint)."""
        array = _to_array(data, None)
        self._data = np.array(array, dtype=self._data.dtype, order="C", copy=True)
        _dtype.round_bfloat16_writes((self._data,))
        return self

    def clone(self, name=None):
        return Parameter(self._data.copy(), name or self.name, self.requires_grad)

    def __repr__(self):
        return f"Parameter(name={self.name!r}, shape={self.shape}, dtype={self.dtype}, requires_grad={self.requires_grad})"

    def __reduce__(self):
        return (Parameter, (self._data, self.name, self.requires_grad))


from . import autograd as _autograd  # noqa: E402  (autograd needs Tensor first)
from .ops import functional as _F  # noqa: E402
