"""PyTorch eager peer of benchmarks/resnet_tiny.py: ResNet-8 (16-32-64 channels, basic blocks with
BatchNorm) on the shipped MNIST images with the suite's recipe (_mnist_convnet_recipe.py), one JSON
line. `--init-out` saves the initial weights so the suite can start from them
(`resnet_tiny.py --same-init`); the batches are drawn from numpy's default_rng(seed), which that mode
replays.

    python resnet_tiny_torch.py --data ../../data/images/mnist/mnist_test10k.npz --epochs 2
"""
from torch import nn

import _mnist_convnet_recipe


def conv_bn(cin, cout, kernel, stride):
    return [nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False), nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(), *conv_bn(cout, cout, 3, 1))
        self.shortcut = nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else None
        self.relu = nn.ReLU()

    def forward(self, x):
        identity = x if self.shortcut is None else self.shortcut(x)
        return self.relu(self.body(x) + identity)


def resnet8(num_classes=10):
    return nn.Sequential(*conv_bn(1, 16, 3, 1), nn.ReLU(), BasicBlock(16, 16, 1), BasicBlock(16, 32, 2),
                         BasicBlock(32, 64, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))


if __name__ == "__main__":
    _mnist_convnet_recipe.main(resnet8, "resnet", "resnet-tiny")
