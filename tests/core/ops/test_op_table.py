"""The op table: every differentiable primitive is checked here against a numpy reference and
central finite differences (float64), and a subset also at second order."""
import importlib
import pkgutil

import numpy as np
import pytest

import mstrain
import mstrain.ops
from mstrain.ops import primitive
from mstrain.ops.primitive import REGISTRY, apply, dispatch

from . import table_conv, table_indexing, table_math, table_nn
from .helpers import check_op, check_second_order

for _module in pkgutil.iter_modules(mstrain.ops.__path__):  # every op module registers its primitives
    importlib.import_module(f"mstrain.ops.{_module.name}")

CASES = table_math.CASES + table_nn.CASES + table_indexing.CASES + table_conv.CASES
_IDS = [c.id for c in CASES]


class _Spy:
    """A pass-through tracer that notes which primitives ran (forward and backward) and the float
    dtypes they produced."""

    def __init__(self):
        self.seen = set()
        self.float_dtypes = set()

    def apply(self, prim, inputs, attrs):
        self.seen.add(prim.name)
        dispatch.tracer = None
        try:
            out = apply(prim, *inputs, **attrs)
        finally:
            dispatch.tracer = self
        for o in out if isinstance(out, tuple) else (out,):
            if o.dtype.kind == "f":
                self.float_dtypes.add((prim.name, o.dtype))
        return out


@pytest.mark.parametrize("row", CASES, ids=_IDS)
def test_value_and_vjp(row):
    inputs = row.make(np.random.default_rng(abs(hash(row.id)) % 2 ** 32))
    spy = _Spy()
    dispatch.tracer = spy
    try:
        check_op(row.fn, row.ref, inputs, **row.tol)
    finally:
        dispatch.tracer = None
    missing = set(row.prims) - spy.seen
    assert not missing, f"row {row.id} claims {sorted(missing)} but never ran them"


@pytest.mark.parametrize("row", [c for c in CASES if c.second_order], ids=[c.id for c in CASES if c.second_order])
def test_second_order(row):
    inputs = row.make(np.random.default_rng(7))
    for position, x in enumerate(inputs):
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            check_second_order(row.fn, inputs, position)


@pytest.mark.parametrize("row", [c for c in CASES if c.id != "cast"], ids=[c.id for c in CASES if c.id != "cast"])
def test_float32_stays_float32_forward_and_backward(row):
    """No primitive on the way (VJPs included) may upcast float32 inputs to float64."""
    inputs = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
              for a in row.make(np.random.default_rng(3))]
    tensors = [mstrain.Tensor(a) if isinstance(a, np.ndarray) else a for a in inputs]
    positions = tuple(i for i, a in enumerate(inputs) if isinstance(a, np.ndarray) and a.dtype.kind == "f")

    def loss(*args):
        outs = row.fn(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return mstrain.ops.add_n([mstrain.ops.sum(o) for o in outs if o.dtype.kind == "f"])

    spy = _Spy()
    dispatch.tracer = spy
    try:
        mstrain.grad(loss, grad_position=positions)(*tensors)
    finally:
        dispatch.tracer = None
    upcast = sorted(name for name, dtype in spy.float_dtypes if dtype != np.float32)
    assert not upcast, f"float32 inputs produced other float dtypes in {upcast}"


_KITS = ("mstrain.gnn", "mstrain.transformer", "mstrain.recommender", "mstrain.reinforcement")


def _in_core(module):
    """A module of core (installed as `mstrain`), not of a kit (kits test their own primitives)."""
    return module.startswith("mstrain.") and not module.startswith(_KITS)


def test_every_differentiable_primitive_is_in_the_table():
    """Every differentiable, deterministic primitive of core needs a row. Stateful ones (collectives,
    recompute) are not functions of their inputs alone: their rooms test them (under mpiexec)."""
    covered = {name for c in CASES for name in c.prims}
    required = {name for name, p in REGISTRY.items()
                if p.differentiable and not p.stateful and _in_core(p.impl.__module__)}
    missing = sorted(required - covered)
    assert not missing, f"differentiable primitives without a row in tests/core/ops/table_*.py: {missing}"


def test_table_names_are_registered():
    unknown = sorted({name for c in CASES for name in c.prims} - set(REGISTRY))
    assert not unknown, f"table rows name unknown primitives: {unknown}"


def test_primitives_declare_valid_kinds_and_templates():
    for name, prim in REGISTRY.items():
        assert prim.kind in primitive.KINDS, name
        if prim.kind == "elementwise" and prim.cpp is not None and prim.num_inputs is not None:
            fields = {f"{{{i}}}" for i in range(prim.num_inputs)}
            used = {f for f in fields if f in prim.cpp}
            assert used, f"{name}: cpp template {prim.cpp!r} uses none of its inputs"
            attrs = {"dtype": "float", **{a: 1 for a in prim.attr_names}}
            prim.cpp.format(*[f"in{i}" for i in range(prim.num_inputs)], **attrs)
