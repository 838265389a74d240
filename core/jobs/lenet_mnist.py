"""Job `lenet_mnist`: LeNet-5 on the shipped MNIST images (MindSpore's first tutorial network).

    mstrain --config configs/lenet_mnist.yaml [train.epochs=5 optimizer.lr=0.002 ...]

Data and split as `mlp_mnist` (first `train_size` images train, last `test_size` test), kept as
(N, 1, 28, 28). Network (MindSpore model zoo's LeNet5): Conv2d(1, 6, 5, valid) ReLU MaxPool(2)
Conv2d(6, 16, 5, valid) ReLU MaxPool(2) Flatten Dense(400, 120) ReLU Dense(120, 84) ReLU
Dense(84, 10). Result: {"test_acc", "train_loss", "epochs", "seconds"}.
"""
from dataclasses import dataclass

from .. import nn
from ..config import JobConfig, option, section
from ..registry import register_job
from .mlp_mnist import MnistData, run_image_classifier

__all__ = ["LeNet5", "LeNetMnistConfig", "run"]


class LeNet5(nn.Cell):
    """LeNet-5 for 28x28 single-channel images (the model zoo's, with `channels` input planes)."""

    def __init__(self, num_classes=10, channels=1, include_top=True):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 6, 5, pad_mode="valid", has_bias=True)
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid", has_bias=True)
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.include_top = include_top
        if include_top:
            self.fc1 = nn.Dense(16 * 4 * 4, 120)
            self.fc2 = nn.Dense(120, 84)
            self.fc3 = nn.Dense(84, num_classes)

    def construct(self, x):
        x = self.max_pool2d(self.relu(self.conv1(x)))          # (N, 6, 12, 12)
        x = self.max_pool2d(self.relu(self.conv2(x)))          # (N, 16, 4, 4)
        if not self.include_top:
            return x
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


@dataclass
class LeNetModel:
    """The network."""
    num_classes: int = option(10, "output classes of the last Dense layer", low=2)


@dataclass
class LeNetMnistConfig(JobConfig):
    """Config of the lenet_mnist job."""
    data: MnistData = section(MnistData)
    model: LeNetModel = section(LeNetModel)


@register_job("lenet_mnist", schema=LeNetMnistConfig)
def run(cfg):
    """Train LeNet-5 on MNIST and report the test accuracy."""
    return run_image_classifier(cfg, "lenet_mnist", lambda: LeNet5(cfg.model.num_classes))
