"""PyTorch eager peer of benchmarks/lenet_mnist.py: LeNet-5 on the shipped MNIST images, the suite's
recipe (_mnist_convnet_recipe.py: first 8000 train / last 2000 test, batch 64, Adam peak lr 2e-3
decayed to 0 by a cosine over all steps, 5 warm-up steps, standardised pixels), one JSON line.

    python lenet_mnist_torch.py --data ../../data/images/mnist/mnist_test10k.npz --epochs 2
"""
from torch import nn

import _mnist_convnet_recipe


def lenet():
    return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2, 2), nn.Flatten(), nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))


if __name__ == "__main__":
    _mnist_convnet_recipe.main(lenet, "lenet", "lenet-mnist")
