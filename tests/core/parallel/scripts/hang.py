"""Every rank waits for a message nobody sends (a deadlock): the test harness must kill the job."""
import numpy as np

from _common import comm

comm.init()
comm.recv_array((1,), np.float64, src=(comm.get_rank() + 1) % comm.get_group_size())
