"""`ParameterTuple`: an immutable group of Parameters that can clone itself (optimizer state)."""
import numpy as np

from ..tensor import Parameter

__all__ = ["ParameterTuple"]


class ParameterTuple(tuple):
    """A tuple of `Parameter`s, as MindSpore's. A Cell attribute holding one registers every member.

    >>> import numpy as np
    >>> params = ParameterTuple([Parameter(np.ones(2, np.float32), name="w")])
    >>> [p.name for p in params.clone(prefix="moment1")]
    ['moment1.w']
    """

    def __new__(cls, iterable=()):
        items = tuple(iterable)
        for i, item in enumerate(items):
            if not isinstance(item, Parameter):
                raise TypeError(f"ParameterTuple: item {i} is a {type(item).__name__}, not a Parameter")
        return super().__new__(cls, items)

    def clone(self, prefix, init="zeros"):
        """New Parameters shaped like these, named `<prefix>.<name>`, not trainable (optimizer state).

        `init` is an initializer name or object (see `mstrain.common.initializer`); 'same' copies values.
        """
        from .initializer import initializer
        clones = []
        for p in self:
            if isinstance(init, str) and init == "same":
                data = p._data.copy()
            else:
                data = np.asarray(initializer(init, p.shape, p.dtype)._data)
            clones.append(Parameter(data, name=f"{prefix}.{p.name}", requires_grad=False))
        return ParameterTuple(clones)
