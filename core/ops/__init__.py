"""Ops: the primitive table (`primitive.REGISTRY`) and its functional and MindSpore-class faces."""
from . import functional
from .functional import *  # noqa: F401,F403
from .primitive import REGISTRY, Primitive, apply, defop, get  # noqa: F401
