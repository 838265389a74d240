"""The Python-API parallel context checked across ranks where training starts (build_train_network).
argv: out mode; mode: mismatch (rank 1 sets a different gradients_mean: the job must end naming it),
same (the same context everywhere: one all-gather per train network built)."""
import sys

from _common import comm, ms, mlp, out_dir, save
from mstrain import nn

out, mode = out_dir(), sys.argv[2]
comm.init()
gathers = []
_all_gather_object = comm.all_gather_object


def _counting_all_gather_object(obj, group=None):
    if isinstance(obj, str) and obj.startswith("{"):  # the context check's exchange (not the strategy file's)
        gathers.append(obj)
    return _all_gather_object(obj, group)


comm.all_gather_object = _counting_all_gather_object  # the check resolves it through the package
ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=mode == "same" or comm.get_rank() == 0,
                             strategy_ckpt_save_file=str(out / f"strategy_{comm.get_rank()}.json"))  # per-rank paths are fine


def _build_step():
    net = mlp()
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    return ms.build_train_network(loss, nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9))


_build_step()
print("started", flush=True)  # never reached when the contexts differ
_build_step()
after_repeat = len(gathers)
ms.set_auto_parallel_context(gradients_mean=False)
_build_step()
save(out, after_repeat=after_repeat, after_change=len(gathers),
     strategy_written=(out / f"strategy_{comm.get_rank()}.json").exists())
