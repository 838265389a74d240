"""all_to_all_v_array: rank r sends (r + i) % 3 rows of value 100 r + i (shape (k, 2), int64) to rank i;
argv: out. Each rank saves what it received, concatenated, and the row counts."""
import numpy as np

from _common import comm, out_dir, save

out = out_dir()
comm.init()
r, n = comm.get_rank(), comm.get_group_size()
chunks = [np.full(((r + i) % 3, 2), 100 * r + i, np.int64) for i in range(n)]
received = comm.all_to_all_v_array(chunks)
save(out, rows=np.concatenate(received), counts=np.array([len(c) for c in received]))
