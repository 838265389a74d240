"""The GNN kit's C++ kernels: multi-head CSR graph kernels (`mstrain.gnn.kernels.graph`).

`gnn/kernels/src/<stem>.cpp` is built by setup.py into `mstrain.gnn.kernels._<stem>` and reached
through `mstrain.kernels.native_module("mstrain.gnn", stem)`; every kernel has a numpy reference
that runs when the extension is missing, and the tests compare the two.
"""
from . import graph

__all__ = ["graph"]
