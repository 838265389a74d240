"""Rank 1 leaves early while rank 0 waits in a collective; argv: out how (cli | exit).
cli: the CLI reports a user error (and aborts the job); exit: a plain sys.exit(3)."""
import sys

import numpy as np

from _common import comm
from mstrain.errors import ConfigError

comm.init()
if comm.get_rank() == 1:
    if sys.argv[2] == "cli":
        from mstrain.cli import _user_error
        sys.exit(_user_error(ConfigError("bad value", source="job.yaml", key="train.lr")))
    sys.exit(3)
comm.all_reduce_array(np.ones(3))
