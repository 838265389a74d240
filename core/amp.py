"""Automatic mixed precision (MindSpore's `amp_level`).

    O0  float32 everywhere.
    O1  white-list layers (Dense, convolutions: matmul-heavy work) compute in float16 and hand
        float32 outputs on; everything else stays float32.
    O2  the network computes in float16 except normalisation layers (LayerNorm, BatchNorm, ...),
        its output is cast back to float32 before the loss; Parameters stay float32 ("master
        weights": `Cell.to_float` casts them where used) and a dynamic loss scale is on by default.
    O3  the whole network computes in float16 (output cast to float32 before the loss); no loss
        scale unless one is given.

`auto_mixed_precision(network, amp_level)` changes a network in place; `build_train_network`
assembles loss + loss scale + optimizer into one train cell (what `Model` uses).
"""
from . import dtype as _dtype
from . import nn
from .errors import ParallelConfigError
from .ops import functional as F
from .parallel.pipeline import PipelineCell, PipelineTrainOneStepCell
from .tensor import Tensor
from .train.loss_scale import DynamicLossScaleManager, LossScaleManager

__all__ = ["auto_mixed_precision", "build_train_network", "AMP_LEVELS", "WHITE_LIST", "KEEP_FP32_LIST"]

AMP_LEVELS = ("O0", "O1", "O2", "O3")
# Layer classes (looked up in mstrain.nn by name; absent ones are skipped) computed in fp16 by O1.
WHITE_LIST = ("Dense", "BiDense", "Conv1d", "Conv2d", "Conv3d", "Conv1dTranspose", "Conv2dTranspose",
              "Conv3dTranspose")
# Layer classes kept in fp32 by O2 (their statistics lose too much in fp16).
KEEP_FP32_LIST = ("LayerNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm",
                  "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")


def _nn_classes(names):
    return tuple(getattr(nn, n) for n in names if isinstance(getattr(nn, n, None), type))


def _to_float32(value):
    if isinstance(value, Tensor) and _dtype.is_floating(value.dtype) and value.dtype != _dtype.float32:
        return F.cast(value, _dtype.float32)
    if isinstance(value, (tuple, list)):
        return type(value)(_to_float32(v) for v in value)
    return value


def _output_to_float32(cell):
    """Make `cell` return float32 outputs (its own construct, then a cast); names are unchanged."""
    inner = cell.construct

    def construct(*args, **kwargs):
        return _to_float32(inner(*args, **kwargs))

    object.__setattr__(cell, "construct", construct)
    return cell


def resolve_level(amp_level):
    """The amp level to run: 'auto' is the device's recommended level (MindSpore: O2 on GPU, O3
    on Ascend); on the CPU, where float16 arithmetic is emulated and slower, it is O0."""
    if amp_level == "auto":
        return "O0"
    if amp_level not in AMP_LEVELS:
        raise ValueError(f"amp_level must be one of {AMP_LEVELS} or 'auto', got {amp_level!r}")
    return amp_level


_check_level = resolve_level


def auto_mixed_precision(network, amp_level="O0", dtype=_dtype.float16, keep_batchnorm_fp32=None):
    """Set the compute precision of `network` (and its layers) for `amp_level`; returns it.

    `dtype` is the low precision (float16). `keep_batchnorm_fp32` overrides whether O2/O3 keep the
    normalisation layers in float32 (default: O2 yes, O3 no). The network's output is float32
    at O1/O2/O3.
    """
    amp_level = resolve_level(amp_level)
    if amp_level == "O0":
        return network
    if amp_level == "O1":
        white = _nn_classes(WHITE_LIST)
        for _, cell in network.cells_and_names():
            if white and isinstance(cell, white):
                _output_to_float32(cell.to_float(dtype))
        return network
    network.to_float(dtype)
    keep_fp32 = (amp_level == "O2") if keep_batchnorm_fp32 is None else keep_batchnorm_fp32
    if keep_fp32:
        norms = _nn_classes(KEEP_FP32_LIST)
        for _, cell in network.cells_and_names():
            if norms and isinstance(cell, norms):
                cell.to_float(_dtype.float32)
    return _output_to_float32(network)


def _default_loss_scale_manager(level):
    return DynamicLossScaleManager() if level == "O2" else None


def _pipeline_train_network(network, optimizer, loss_fn, level, manager):
    """A PipelineCell (MindSpore's `Model(PipelineCell(net, loss, M), optimizer=opt)`) trains with
    its own 1F1B step; None for any other network."""
    if not isinstance(network, PipelineCell):
        return None
    if loss_fn is not None or level != "O0" or manager is not None:
        raise ParallelConfigError("a PipelineCell holds its own loss and trains in float32 without loss "
                                  "scaling: pass Model(pipeline_cell, optimizer=opt) with no loss_fn, "
                                  "amp_level or loss_scale_manager")
    return PipelineTrainOneStepCell(network, optimizer)


def build_train_network(network, optimizer, loss_fn=None, level="O0", boost_level="O0", **kwargs):
    """The train cell Model uses: mixed precision per `level`, `loss_fn` attached (in float32),
    and a loss-scaled step when a loss scale manager is given (O2 defaults to dynamic scaling).

    kwargs: `loss_scale_manager` (a LossScaleManager; None = the level's default),
    `keep_batchnorm_fp32` (see auto_mixed_precision), `cast_model_type` (the low precision of
    O2/O3, float16 by default).
    Without `loss_fn` the network must already return the loss.
    """
    level = resolve_level(level)
    if boost_level != "O0":
        raise ValueError(f"boost_level {boost_level!r} is not supported (only 'O0')")
    unknown = set(kwargs) - {"loss_scale_manager", "keep_batchnorm_fp32", "cast_model_type"}
    if unknown:
        raise TypeError(f"build_train_network: unknown argument(s) {sorted(unknown)}")
    manager = kwargs.get("loss_scale_manager")
    if manager is None:
        manager = _default_loss_scale_manager(level)
    elif not isinstance(manager, LossScaleManager):
        raise TypeError(f"loss_scale_manager must be a LossScaleManager, got {type(manager).__name__}")
    pipeline = _pipeline_train_network(network, optimizer, loss_fn, level, manager)
    if pipeline is not None:
        return pipeline
    network = auto_mixed_precision(network, level, dtype=kwargs.get("cast_model_type") or _dtype.float16,
                                   keep_batchnorm_fp32=kwargs.get("keep_batchnorm_fp32"))
    loss_network = network if loss_fn is None else nn.WithLossCell(network, loss_fn)
    if manager is None:  # the train cell plans itself under the parallel context
        return nn.TrainOneStepCell(loss_network, optimizer)
    return nn.TrainOneStepWithLossScaleCell(loss_network, optimizer, scale_sense=manager.get_update_cell())
