"""Rank 1 raises while the others wait in a collective: the job must end, naming rank 1."""
import numpy as np

from _common import comm

comm.init()
if comm.get_rank() == 1:
    raise RuntimeError("deliberate failure on this rank")
comm.all_reduce_array(np.ones(3))  # would wait forever without the abort
