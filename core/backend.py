"""The array-module seam. Every kernel computes with `xp`; numpy today, CuPy can slot in here."""
import numpy

xp = numpy


def set_array_module(module):
    """Swap the array module (e.g. cupy). Kernels look `backend.xp` up at call time."""
    global xp
    xp = module
