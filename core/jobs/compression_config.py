"""Config schemas of the compression jobs (`lenet_mnist_qat`, `lenet_mnist_slb`, `resnet8_mnist_scop`;
the code that runs them is mstrain.jobs.compression_jobs). Each job first trains the float network
with the common `train` / `optimizer` sections (the baseline), then compresses a copy of it with the
`compression` section, and reports both side by side."""
from dataclasses import dataclass
from typing import List, Optional

from ..config import JobConfig, option, section
from .mlp_mnist import MnistData

__all__ = ["SpeedReport", "Report", "QatSection", "SlbSection", "ScopSection", "LenetQatConfig", "LenetSlbConfig",
           "Resnet8ScopConfig"]


@dataclass
class SpeedReport:
    """How the float and compressed networks are measured after training."""
    speed_batch: int = option(500, "images per inference call when measuring images/s", low=1)
    speed_repeats: int = option(3, "timed passes over the test images per network (the median is reported)", low=1)


@dataclass
class Report(SpeedReport):
    """How the networks are measured, and where the quantized network's file goes."""
    save_path: Optional[str] = option(None, "write the quantized network's file here (null: do not write; "
                                      "format: mstrain.compression.int8)")


@dataclass
class QatSection:
    """Quantization-aware training (SimulatedQuantizationAwareTraining) of the float-trained network."""
    epochs: int = option(2, "fine-tuning epochs with fake quantization", low=0)
    lr: float = option(2e-4, "learning rate of the fine-tuning (Adam)", low=0.0)
    weight_bits: int = option(8, "weight bits (per channel, symmetric)", low=2, high=8)
    act_bits: int = option(8, "activation bits (per tensor, asymmetric)", low=2, high=8)
    ema_decay: float = option(0.99, "decay of the activation min/max moving averages", low=0.0, high=0.9999)
    bn_fold: bool = option(True, "fold each Conv2d's BatchNorm2d into its quantized weights")
    freeze_bn_steps: int = option(0, "steps after which folded BatchNorm statistics freeze; 0 = never", low=0)
    include: Optional[List[str]] = option(None, "cell path patterns to quantize (null: every Conv2d and Dense)")
    exclude: List[str] = option([], "cell path patterns left in float")


@dataclass
class SlbSection:
    """SLB low-bit weight search (SlbQuantAwareTraining) started from the float-trained weights."""
    epochs: int = option(4, "search epochs", low=0)
    lr: float = option(1e-3, "learning rate of the search (Adam)", low=0.0)
    weight_bits: int = option(4, "weight bits: 1, 2 or 4", choices=[1, 2, 4])
    act_bits: int = option(8, "activation bits of the searched layers' inputs", low=2, high=8)
    t_start: float = option(1.0, "temperature of the value softmax at the start", low=0.0)
    t_end: float = option(0.01, "temperature at the end of the search (geometric decay)", low=0.0)
    ema_decay: float = option(0.99, "decay of the activation min/max moving averages", low=0.0, high=0.9999)
    include: Optional[List[str]] = option(None, "cell path patterns to search (null: every Conv2d and Dense)")
    exclude: List[str] = option(["conv1", "fc3"], "cell path patterns left in float (SLB keeps the first and "
                                "last layers)")


@dataclass
class ScopSection:
    """SCOP structured pruning: knockoff training, pruning by the knockoff criterion, fine-tuning."""
    kf_epochs: int = option(2, "epochs training the knockoff scaling factors", low=0)
    kf_lr: float = option(1e-2, "learning rate of the knockoff training (the optimizer section's, with this lr)",
                          low=0.0)
    freeze_network: bool = option(True, "the knockoff epochs train only the scaling factors (weights and BatchNorm "
                                  "statistics frozen, as Golden Stick's SCOP); false: the network trains with them")
    prune_rate: float = option(0.5, "fraction of each channel group's channels removed (lowest knockoff "
                               "importance first); 0 = use threshold", low=0.0, high=0.95)
    threshold: float = option(0.0, "with prune_rate 0: remove channels whose importance beta - (1 - beta) "
                              "is below this", low=-1.0, high=1.0)
    finetune_epochs: int = option(2, "fine-tuning epochs of the pruned network", low=0)
    finetune_lr: float = option(5e-4, "learning rate of the fine-tuning (Adam)", low=0.0)
    knockoff_shrinkage: float = option(0.3, "shrinkage of the pixel covariance toward its diagonal for the "
                                       "Gaussian knockoff images (0..1; more: knockoffs further from copies)",
                                       low=0.0, high=1.0)
    include: Optional[List[str]] = option(None, "cell path patterns of prunable Conv2d layers (null: all); a "
                                          "channel group is pruned when all its convolutions match")
    exclude: List[str] = option([], "cell path patterns never pruned (with every channel group they belong to)")


@dataclass
class LenetQatConfig(JobConfig):
    """Config of the lenet_mnist_qat job."""
    data: MnistData = section(MnistData)
    report: Report = section(Report)
    compression: QatSection = section(QatSection)


@dataclass
class LenetSlbConfig(JobConfig):
    """Config of the lenet_mnist_slb job."""
    data: MnistData = section(MnistData)
    report: Report = section(Report)
    compression: SlbSection = section(SlbSection)


@dataclass
class Resnet8ScopConfig(JobConfig):
    """Config of the resnet8_mnist_scop job."""
    data: MnistData = section(MnistData)
    report: SpeedReport = section(SpeedReport)
    compression: ScopSection = section(ScopSection)
