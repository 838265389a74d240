"""Each rank is given a different model_parallel: start-up must refuse with one clear message."""
from _common import comm
from mstrain.parallel.config import init_parallel

comm.init()
init_parallel({"parallel_mode": "semi_auto_parallel", "model_parallel": 1 + comm.get_rank() % 2}, model={"num_heads": 4})
print("started")  # never reached
