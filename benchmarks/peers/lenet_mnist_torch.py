"""PyTorch eager peer of benchmarks/lenet_mnist.py: LeNet-5 on the shipped MNIST images, the same
recipe (first 8000 train / last 2000 test, batch 64, Adam peak lr 2e-3 decayed to 0 by a cosine over all
steps, 5 warm-up steps, standardised pixels), one JSON line.

    python lenet_mnist_torch.py --data ../../data/images/mnist/mnist_test10k.npz --epochs 2
"""
import argparse
import json
import math
import platform
import time

import numpy as np
import torch
from torch import nn


def lenet():
    return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2, 2), nn.Flatten(), nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))


def cosine_lr(step, total_steps, peak):
    """MindSpore's CosineDecayLR(0, peak, total_steps) at this 0-based step (the suite's schedule)."""
    return 0.5 * peak * (1.0 + math.cos(math.pi * min(step, total_steps) / total_steps))


def train_step(net, optimizer, loss_fn, x, y, lr):
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad()
    loss_fn(net(x), y).backward()
    optimizer.step()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate of the cosine schedule")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    archive = np.load(args.data)
    x = ((archive["x"].astype(np.float32) / 255.0) - 0.1307) / 0.3081
    x, y = torch.tensor(x[:, None]), torch.tensor(archive["y"].astype(np.int64))
    train_x, train_y, test_x, test_y = x[:8000], y[:8000], x[-2000:], y[-2000:]
    net = lenet()
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(args.seed)
    warm_steps, steps_per_epoch = 5, 8000 // args.batch
    total_steps, step = warm_steps + args.epochs * steps_per_epoch, 0
    for k in range(warm_steps):  # warm-up steps, as the suite's (they count in the schedule)
        idx = torch.tensor(rng.permutation(8000)[:args.batch])
        train_step(net, optimizer, loss_fn, train_x[idx], train_y[idx], cosine_lr(step, total_steps, args.lr))
        step += 1
    images, seconds, cpu_seconds = 0, 0.0, 0.0
    for _ in range(args.epochs):
        order = torch.tensor(rng.permutation(8000))
        start, cpu_start = time.perf_counter(), time.process_time()
        for k in range(0, steps_per_epoch * args.batch, args.batch):
            idx = order[k:k + args.batch]
            train_step(net, optimizer, loss_fn, train_x[idx], train_y[idx], cosine_lr(step, total_steps, args.lr))
            step += 1
            images += args.batch
        seconds += time.perf_counter() - start
        cpu_seconds += time.process_time() - cpu_start
    with torch.no_grad():
        accuracy = float((net(test_x).argmax(1) == test_y).float().mean())
    print(json.dumps({"workload": "lenet", "name": "lenet-mnist", "peer": "pytorch-eager", "mode": "eager",
                      "speed_metric": "train_images_per_s", "speed": round(images / seconds, 2),
                      "quality_metric": f"test_acc_after_{args.epochs}_epochs", "quality": round(accuracy, 4),
                      "cpu_ms_per_step": round(1e3 * cpu_seconds * args.batch / images, 3),
                      "torch": torch.__version__, "python": platform.python_version(), "threads": args.threads}))


if __name__ == "__main__":
    main()
