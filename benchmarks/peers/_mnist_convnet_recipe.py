"""The recipe the PyTorch peers of benchmarks/lenet_mnist.py and benchmarks/resnet_tiny.py share, the
suite's own: first 8000 shipped MNIST images train, last 2000 test, standardised pixels, batch 64,
Adam with its peak lr decayed to 0 by a cosine over all steps (the 5 warm-up steps included), batches
drawn from numpy's default_rng(seed) permutations; one JSON line. `--init-out` saves the initial
weights so the suite can start from them (`--same-init`).
"""
import argparse
import json
import math
import platform
import time

import numpy as np
import torch
from torch import nn


def cosine_lr(step, total_steps, peak):
    """MindSpore's CosineDecayLR(0, peak, total_steps) at this 0-based step (the suite's schedule)."""
    return 0.5 * peak * (1.0 + math.cos(math.pi * min(step, total_steps) / total_steps))


def train_step(net, optimizer, loss_fn, x, y, lr):
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad()
    loss_fn(net(x), y).backward()
    optimizer.step()


def main(build_net, workload, name):
    """Train `build_net()` with the recipe of the module docstring and print the peer's JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate of the cosine schedule")
    parser.add_argument("--init-out", default=None,
                        help="write the initial state (state_dict order, BatchNorm counters left out) to this .npz")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    archive = np.load(args.data)
    x = ((archive["x"].astype(np.float32) / 255.0) - 0.1307) / 0.3081
    x, y = torch.tensor(x[:, None]), torch.tensor(archive["y"].astype(np.int64))
    train_x, train_y, test_x, test_y = x[:8000], y[:8000], x[-2000:], y[-2000:]
    net = build_net()
    if args.init_out:
        state = [v.detach().numpy().copy() for k, v in net.state_dict().items()
                 if not k.endswith("num_batches_tracked")]
        np.savez(args.init_out, *state)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(args.seed)
    net.train()
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
    net.eval()
    with torch.no_grad():
        accuracy = float((net(test_x).argmax(1) == test_y).float().mean())
    print(json.dumps({"workload": workload, "name": name, "peer": "pytorch-eager", "mode": "eager",
                      "speed_metric": "train_images_per_s", "speed": round(images / seconds, 2),
                      "quality_metric": f"test_acc_after_{args.epochs}_epochs", "quality": round(accuracy, 4),
                      "cpu_ms_per_step": round(1e3 * cpu_seconds * args.batch / images, 3),
                      "torch": torch.__version__, "python": platform.python_version(), "threads": args.threads}))

