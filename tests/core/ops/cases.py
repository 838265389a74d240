"""Building blocks for the op table: input makers and the `Case` record."""
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Case:
    """One row of the op table: which primitives it exercises, how to call them, the reference."""
    prims: tuple
    fn: object
    ref: object
    make: object                      # rng -> list of inputs
    name: str = ""
    tol: dict = field(default_factory=dict)
    second_order: bool = False

    @property
    def id(self):
        return self.name or self.prims[0]


def case(prims, fn, ref, *makers, name="", second_order=False, **tol):
    prims = (prims,) if isinstance(prims, str) else tuple(prims)
    return Case(prims, fn, ref, lambda rng: [m(rng) if callable(m) else m for m in makers], name, tol,
                second_order)


def normal(*shape):
    return lambda rng: rng.standard_normal(shape)


def positive(*shape, low=0.5, high=2.0):
    return lambda rng: rng.uniform(low, high, shape)


def away(*shape, margin=0.2):
    """Normal values pushed at least `margin` away from 0 (kinks of relu, abs, ...)."""
    def make(rng):
        x = rng.standard_normal(shape)
        return np.where(x >= 0, x + margin, x - margin)
    return make


def integers(high, *shape, low=0):
    return lambda rng: rng.integers(low, high, shape)


def const(value):
    return lambda rng: value
