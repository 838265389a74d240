"""Job `resnet8_mnist`: ResNet-8 on the shipped MNIST images.

    mstrain --config configs/resnet8_mnist.yaml [train.epochs=5 optimizer.lr=0.002 ...]

Data and split as `lenet_mnist`. Network (`ResNet8`, the CIFAR-style ResNet of He et al. with one
basic block per stage, for 28x28 single-channel images): Conv2d(1, 16, 3) BatchNorm ReLU, basic
blocks of 16, 32 and 64 channels (strides 1, 2, 2; a 1x1 Conv2d + BatchNorm shortcut where the
shape changes), global average pooling, Dense(64, 10). Result: {"test_acc", "train_loss",
"epochs", "seconds"}.
"""
from dataclasses import dataclass

from .. import nn
from ..config import JobConfig, option, section
from ..registry import register_job
from .mlp_mnist import MnistData, run_image_classifier

__all__ = ["BasicBlock", "ResNet8", "ResNetMnistConfig", "run"]


class BasicBlock(nn.Cell):
    """conv3x3(stride) BN ReLU conv3x3 BN, plus the shortcut (identity, or 1x1 conv + BN), then ReLU."""

    def __init__(self, in_channels, out_channels, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, pad_mode="pad", padding=1)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, pad_mode="pad", padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()
        self.down_sample = None
        if stride != 1 or in_channels != out_channels:
            self.down_sample = nn.SequentialCell([nn.Conv2d(in_channels, out_channels, 1, stride=stride),
                                                  nn.BatchNorm2d(out_channels)])

    def construct(self, x):
        identity = x if self.down_sample is None else self.down_sample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet8(nn.Cell):
    """ResNet-8: stem conv, three basic blocks (16, 32, 64 channels), average pool, Dense."""

    def __init__(self, num_classes=10, channels=1, widths=(16, 32, 64)):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, widths[0], 3, pad_mode="pad", padding=1)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU()
        self.layer1 = BasicBlock(widths[0], widths[0], 1)
        self.layer2 = BasicBlock(widths[0], widths[1], 2)
        self.layer3 = BasicBlock(widths[1], widths[2], 2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(widths[2], num_classes)

    def construct(self, x):
        x = self.relu(self.bn1(self.conv1(x)))              # (N, 16, 28, 28)
        x = self.layer3(self.layer2(self.layer1(x)))        # (N, 64, 7, 7)
        return self.fc(self.flatten(self.pool(x)))


@dataclass
class ResNetModel:
    """The network."""
    num_classes: int = option(10, "output classes of the last Dense layer", low=2)


@dataclass
class ResNetMnistConfig(JobConfig):
    """Config of the resnet8_mnist job."""
    data: MnistData = section(MnistData)
    model: ResNetModel = section(ResNetModel)


@register_job("resnet8_mnist", schema=ResNetMnistConfig)
def run(cfg):
    """Train ResNet-8 on MNIST and report the test accuracy."""
    return run_image_classifier(cfg, "resnet8_mnist", lambda: ResNet8(cfg.model.num_classes))
