"""The resume position saved next to the weights: everything besides Parameters that an
interrupted run needs to continue bit-identically.

    {"epoch": current epoch (1-based), "step": global steps done,
     "step_in_epoch": steps done in that epoch, "batch_num": steps per epoch,
     "dataset_state": the training data position (mstrain.train.dataset_helper.BatchStream),
     "rng_state": mstrain.random.get_rng_state(), "loss_scale_state": the loss-scale update cell's state}

Parameters (weights, optimizer moments, the optimizer's step counter) travel as tensors of the
train network; this dict travels as the checkpoint's `'train_state'` meta entry.

Public (mstrain.train): `resume_info(run_context)`, the entries a checkpoint written by a callback
needs so that `Model.train(..., resume_from=path)` continues it, and `resume_position(checkpoint)`,
where such a checkpoint continues.
"""
import dataclasses

from .. import random
from .serialization import TRAIN_STATE_KEY

__all__ = ["capture", "ResumePoint", "resume_point", "restore_runtime", "resume_info", "resume_position"]


def _loss_scale_cell(train_network):
    cell = getattr(train_network, "scale_sense", None)
    return cell if hasattr(cell, "get_state") and hasattr(cell, "set_state") else None


def capture(args):
    """The resume position of a run from its RunContextArgs (call at a step end)."""
    scale_cell = _loss_scale_cell(args.train_network)
    return {
        "epoch": args.cur_epoch_num,
        "step": args.cur_step_num,
        "step_in_epoch": args.cur_step_in_epoch,
        "batch_num": args.batch_num,
        "dataset_state": args.dataset_state,
        "rng_state": random.get_rng_state(),
        "loss_scale_state": None if scale_cell is None else scale_cell.get_state(),
    }


def resume_info(run_context):
    """The `append_dict` entries (MindSpore's epoch_num and step_num, and the resume position) that
    make a checkpoint saved at this point of a run resumable with `Model.train(resume_from=...)`.
    `run_context`: a callback's RunContext (or its RunContextArgs), at a step or epoch end."""
    args = run_context.original_args() if hasattr(run_context, "original_args") else run_context
    return {"epoch_num": args.cur_epoch_num, "step_num": args.cur_step_num, TRAIN_STATE_KEY: capture(args)}


def resume_position(checkpoint):
    """The ResumePoint of a loaded resumable checkpoint (a `load_checkpoint` dict), or None when it
    holds no run position."""
    state = checkpoint.get(TRAIN_STATE_KEY)
    return resume_point(state) if isinstance(state, dict) else None


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run starts: `epochs_done` complete epochs, then `step_in_epoch` steps of
    the next one, `step` steps in all, the data at `dataset_state`."""
    step: int
    epochs_done: int
    step_in_epoch: int
    dataset_state: dict


def resume_point(state):
    """Where to continue from a captured `state`.

    An epoch whose steps were all done counts as done (the run continues with the next epoch);
    a partly done epoch (training was stopped mid-epoch) continues where it stopped.
    """
    epoch, in_epoch = int(state["epoch"]), int(state["step_in_epoch"])
    if in_epoch >= int(state["batch_num"]):
        epochs_done, in_epoch = epoch, 0
    else:
        epochs_done = epoch - 1
    return ResumePoint(step=int(state["step"]), epochs_done=max(epochs_done, 0),
                       step_in_epoch=in_epoch, dataset_state=state.get("dataset_state"))


def restore_runtime(state, train_network):
    """Put the global RNG and the loss-scale update cell back where `state` found them.

    Call after the data position is restored, so nothing drawn while seeking the data moves the RNG.
    """
    if state.get("rng_state") is not None:
        random.set_rng_state(state["rng_state"])
    scale_cell = _loss_scale_cell(train_network)
    if scale_cell is not None and state.get("loss_scale_state") is not None:
        scale_cell.set_state(state["loss_scale_state"])
