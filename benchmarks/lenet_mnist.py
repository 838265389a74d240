"""LeNet-5 on the shipped MNIST images: training images/s (eager and loop sink) and test accuracy
after N epochs, side by side with PyTorch eager (benchmarks/peers/lenet_mnist_torch.py, same recipe:
batch 64, Adam with a peak lr of 2e-3 that a cosine (CosineDecayLR) takes to 0 over all steps, the 5
warm-up steps included, as benchmarks/resnet_tiny.py).

    python benchmarks/lenet_mnist.py [--epochs 2] [--peer]
"""
import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

DATA = _common.REPO / "data" / "images" / "mnist" / "mnist_test10k.npz"
WARM_STEPS, PEAK_LR = 5, 2e-3


def train(epochs, batch, sink, seed):
    """(images/s, test accuracy, CPU ms per step of all threads: steadier than the wall time on a shared
    machine)."""
    import mstrain as ms
    from mstrain import dataset as ds
    from mstrain import nn
    from mstrain.jobs.lenet_mnist import LeNet5
    from mstrain.jobs.mlp_mnist import load_mnist
    ms.set_seed(seed)
    (x_train, y_train), (x_test, y_test) = load_mnist(str(DATA), 8000, 2000)
    train_set = ds.NumpySlicesDataset({"x": x_train.reshape(-1, 1, 28, 28), "y": y_train}, shuffle=True)
    train_set = train_set.batch(batch, drop_remainder=True)
    test_set = ds.NumpySlicesDataset({"x": x_test.reshape(-1, 1, 28, 28), "y": y_test}, shuffle=False).batch(500)
    net = LeNet5()
    schedule = nn.CosineDecayLR(0.0, PEAK_LR, WARM_STEPS + epochs * train_set.get_dataset_size())
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Adam(net.trainable_params(), learning_rate=schedule), metrics={"accuracy"})
    model.train(1, train_set.take(WARM_STEPS), dataset_sink_mode=sink)  # warm-up (and the compile in sink mode)
    start, cpu_start = time.perf_counter(), time.process_time()
    model.train(epochs, train_set, dataset_sink_mode=sink)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    steps = epochs * train_set.get_dataset_size()
    return steps * batch / seconds, float(model.eval(test_set)["accuracy"]), 1e3 * cpu_seconds / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS / OpenMP threads of both sides (default: the machine's cores, peer 2); 1 gives "
                             "steadier ratios on a shared machine")
    parser.add_argument("--peer", action="store_true", help="also run the PyTorch eager peer")
    args = parser.parse_args()
    if args.threads:  # before numpy loads its BLAS
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(args.threads)
    lines = []
    for mode, sink in (("eager", False), ("loop_sink", True)):
        speed, accuracy, cpu_ms = train(args.epochs, args.batch, sink, args.seed)
        line = _common.record("lenet", "lenet-mnist", mode, "train_images_per_s", speed,
                              f"test_acc_after_{args.epochs}_epochs", accuracy, cpu_ms_per_step=round(cpu_ms, 3),
                              batch=args.batch,
                              blas_threads=args.threads or "default")
        _common.emit(line)
        lines.append(line)
    if args.peer:
        peer = _common.run_peer(str(_common.REPO / "benchmarks" / "peers" / "lenet_mnist_torch.py"),
                                ["--data", str(DATA), "--epochs", str(args.epochs), "--seed", str(args.seed)]
                                + (["--threads", str(args.threads)] if args.threads else []))[0]
        for line in lines:
            _common.emit(_common.ratio(line, peer, accuracy_diff_vs_peer=round(line["quality"] - peer["quality"], 4),
                                       cpu_per_step_ratio=round(line["cpu_ms_per_step"] / peer["cpu_ms_per_step"], 4)))


if __name__ == "__main__":
    main()
