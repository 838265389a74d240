"""ResNet-8 on the shipped MNIST images: training images/s (eager and loop sink) and test accuracy
after N epochs, side by side with PyTorch eager (benchmarks/peers/resnet_tiny_torch.py, same recipe).

ResNet-8 (the CIFAR ResNet family at depth 8, single-channel 28x28 inputs): Conv3x3(1, 16) BN ReLU,
three stages of one basic block each (16, 32, 64 channels; strides 1, 2, 2; a 1x1 conv + BN
shortcut where the shape changes), global average pooling, Dense(64, 10). Batch 64, Adam lr 2e-3,
first 8000 images train, last 2000 test, standardised pixels.

    python benchmarks/resnet_tiny.py [--epochs 2] [--modes eager,loop_sink] [--peer]
"""
import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

DATA = _common.REPO / "data" / "images" / "mnist" / "mnist_test10k.npz"
MODES = {"eager": False, "loop_sink": True}


def resnet8(num_classes=10):
    """The mstrain ResNet-8 (see the module docstring)."""
    from mstrain import nn, ops

    def conv_bn(cin, cout, kernel, stride):
        return [nn.Conv2d(cin, cout, kernel, stride=stride, pad_mode="pad", padding=kernel // 2, has_bias=False),
                nn.BatchNorm2d(cout)]

    class BasicBlock(nn.Cell):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.SequentialCell(conv_bn(cin, cout, 3, stride) + [nn.ReLU()] + conv_bn(cout, cout, 3, 1))
            self.shortcut = nn.SequentialCell(conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else None
            self.relu = nn.ReLU()

        def construct(self, x):
            identity = x if self.shortcut is None else self.shortcut(x)
            return self.relu(self.body(x) + identity)

    class ResNet8(nn.Cell):
        def __init__(self):
            super().__init__()
            self.stem = nn.SequentialCell(conv_bn(1, 16, 3, 1) + [nn.ReLU()])
            self.stages = nn.SequentialCell([BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2)])
            self.head = nn.Dense(64, num_classes)

        def construct(self, x):
            x = self.stages(self.stem(x))
            return self.head(ops.mean(x, (2, 3)))

    return ResNet8()


def train(epochs, batch, sink, seed):
    import mstrain as ms
    from mstrain import dataset as ds
    from mstrain import nn
    from mstrain.jobs.mlp_mnist import load_mnist
    ms.set_seed(seed)
    (x_train, y_train), (x_test, y_test) = load_mnist(str(DATA), 8000, 2000)
    train_set = ds.NumpySlicesDataset({"x": x_train.reshape(-1, 1, 28, 28), "y": y_train}, shuffle=True)
    train_set = train_set.batch(batch, drop_remainder=True)
    test_set = ds.NumpySlicesDataset({"x": x_test.reshape(-1, 1, 28, 28), "y": y_test}, shuffle=False).batch(500)
    net = resnet8()
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Adam(net.trainable_params(), learning_rate=2e-3), metrics={"accuracy"})
    model.train(1, train_set.take(5), dataset_sink_mode=sink)  # warm-up (and the compile in sink mode)
    start = time.perf_counter()
    model.train(epochs, train_set, dataset_sink_mode=sink)
    seconds = time.perf_counter() - start
    images = epochs * train_set.get_dataset_size() * batch
    return images / seconds, float(model.eval(test_set)["accuracy"])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", default="eager,loop_sink", help="comma-separated: eager, loop_sink")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS / OpenMP threads of both sides (default: the machine's cores, peer 2); 1 gives "
                             "steadier ratios on a shared machine")
    parser.add_argument("--peer", action="store_true", help="also run the PyTorch eager peer")
    args = parser.parse_args()
    if args.threads:  # before numpy loads its BLAS
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(args.threads)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; choose from {sorted(MODES)}")
    lines = []
    for mode in modes:
        speed, accuracy = train(args.epochs, args.batch, MODES[mode], args.seed)
        line = _common.record("resnet", "resnet-tiny", mode, "train_images_per_s", speed,
                              f"test_acc_after_{args.epochs}_epochs", accuracy, batch=args.batch,
                              blas_threads=args.threads or "default")
        _common.emit(line)
        lines.append(line)
    if args.peer:
        peer = _common.run_peer(str(_common.REPO / "benchmarks" / "peers" / "resnet_tiny_torch.py"),
                                ["--data", str(DATA), "--epochs", str(args.epochs), "--batch", str(args.batch),
                                 "--seed", str(args.seed)]
                                + (["--threads", str(args.threads)] if args.threads else []))[0]
        for line in lines:
            _common.emit(_common.ratio(line, peer, accuracy_diff_vs_peer=round(line["quality"] - peer["quality"], 4)))


if __name__ == "__main__":
    main()
