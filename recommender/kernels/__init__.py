"""The recommender kit's C++ kernels: row reads and writes of a table file (`row_io`).

`recommender/kernels/src/<stem>.cpp` is built by setup.py into `mstrain.recommender.kernels._<stem>`
and reached through `mstrain.kernels.native_module("mstrain.recommender", stem)`; every kernel has a
Python reference that runs when the extension is missing, and the tests compare the two.
"""
from . import row_io

__all__ = ["row_io"]
