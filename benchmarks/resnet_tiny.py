"""ResNet-8 on the shipped MNIST images: training images/s (eager and loop sink) and test accuracy
after N epochs, side by side with PyTorch eager (benchmarks/peers/resnet_tiny_torch.py, same recipe).

ResNet-8 (the CIFAR ResNet family at depth 8, single-channel 28x28 inputs): Conv3x3(1, 16) BN ReLU,
three stages of one basic block each (16, 32, 64 channels; strides 1, 2, 2; a 1x1 conv + BN
shortcut where the shape changes), global average pooling, Dense(64, 10). Batch 64, Adam with a peak
lr of 2e-3 that a cosine (CosineDecayLR) takes to 0 over all steps (the 5 warm-up steps included),
first 8000 images train, last 2000 test, standardised pixels.

    python benchmarks/resnet_tiny.py [--epochs 2] [--modes eager,loop_sink] [--peer] [--seeds 3] [--same-init]

With a constant lr of 2e-3, two epochs of this net landed anywhere in 84-96% test accuracy depending
on the initial draw, the batch order and even float rounding (torch moved by 5 points between its 1-
and 2-thread runs of one seed): the last steps were taken at full lr, so the weights evaluated were
one noisy Adam step from anywhere. The decay to 0 ends the run settled, on both sides alike. `--seeds N` runs seeds seed..seed+N-1 on both sides and ends with an
"accuracy_comparison" line of the means. `--same-init` (with --peer) starts the suite from the peer's
initial weights and replays the peer's batches (numpy's default_rng(seed) permutations), so the two
runs differ only by float32 rounding; the accuracy line then compares like with like.

Where a step's time goes (loop sink, kernels timed in C by the profiler): `--profile` prints the
time per op type and the heaviest kernels.
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

DATA = _common.REPO / "data" / "images" / "mnist" / "mnist_test10k.npz"
PEER = _common.REPO / "benchmarks" / "peers" / "resnet_tiny_torch.py"
MODES = {"eager": False, "loop_sink": True}
WARM_STEPS, PEAK_LR = 5, 2e-3


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


def load_peer_init(net, path):
    """Copy the peer's initial state (its state_dict order: conv weight; BatchNorm weight, bias,
    running mean, running variance; ...) into the suite's ResNet-8, whose parameters come in the
    same order."""
    import numpy as np
    with np.load(path) as archive:
        values = [archive[f"arr_{i}"] for i in range(len(archive.files))]
    params = [p for _, p in net.parameters_and_names()]
    if len(params) != len(values) or any(tuple(p.shape) != v.shape for p, v in zip(params, values)):
        _common.fail(f"the peer's initial state ({len(values)} arrays) does not fit ResNet-8 ({len(params)})")
    for param, value in zip(params, values):
        param.set_data(ms_tensor(value))


def ms_tensor(value):
    import mstrain as ms
    return ms.Tensor(value)


def peer_batches(seed, epochs, batch, train_size):
    """The peer's index draws: WARM_STEPS warm-up batches, then one permutation per epoch."""
    import numpy as np
    rng = np.random.default_rng(seed)
    warm = np.concatenate([rng.permutation(train_size)[:batch] for _ in range(WARM_STEPS)])
    return warm, [rng.permutation(train_size) for _ in range(epochs)]


def train(epochs, batch, sink, seed, init=None, profile=False):
    """(images/s, test accuracy, CPU ms per step (all threads: on a shared machine steadier than the
    wall time)); with `init` (the peer's initial state) the peer's batches too."""
    import mstrain as ms
    from mstrain import dataset as ds
    from mstrain import nn
    from mstrain.jobs.mlp_mnist import load_mnist
    ms.set_seed(seed)
    (x_train, y_train), (x_test, y_test) = load_mnist(str(DATA), 8000, 2000)
    x_train = x_train.reshape(-1, 1, 28, 28)

    def batches(order=None):
        x, y = (x_train, y_train) if order is None else (x_train[order], y_train[order])
        return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=order is None).batch(batch, drop_remainder=True)
    test_set = ds.NumpySlicesDataset({"x": x_test.reshape(-1, 1, 28, 28), "y": y_test}, shuffle=False).batch(500)
    net = resnet8()
    if init is not None:
        load_peer_init(net, init)
    total_steps = WARM_STEPS + epochs * (len(x_train) // batch)
    schedule = nn.CosineDecayLR(0.0, PEAK_LR, total_steps)
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Adam(net.trainable_params(), learning_rate=schedule), metrics={"accuracy"})
    if init is None:
        warm, epoch_sets = batches().take(WARM_STEPS), [batches()] * epochs
    else:
        warm_order, orders = peer_batches(seed, epochs, batch, len(x_train))
        warm, epoch_sets = batches(warm_order), [batches(order) for order in orders]
    model.train(1, warm, dataset_sink_mode=sink)  # warm-up (and the compile in sink mode)
    profiler = ms.Profiler(output_path=os.path.join("outputs", "resnet_tiny_profile")) if profile else None
    start, cpu_start = time.perf_counter(), time.process_time()
    if init is None:
        model.train(epochs, epoch_sets[0], dataset_sink_mode=sink)
    else:
        for epoch_set in epoch_sets:
            model.train(1, epoch_set, dataset_sink_mode=sink)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    if profiler is not None:
        print_profile(profiler.analyse())
    steps = sum(e.get_dataset_size() for e in epoch_sets)
    return steps * batch / seconds, float(model.eval(test_set)["accuracy"]), 1e3 * cpu_seconds / steps


def print_profile(result, top=12):
    """Time per op type and the heaviest kernels of the profiled steps (stderr)."""
    ops = result["ops"]
    total = sum(r["total_s"] for r in ops["ops"]) or 1.0
    print("op type                        calls   share", file=sys.stderr)
    for row in ops["op_types"]:
        print(f"{row['type']:30s} {row['count']:6d} {100 * row['total_s'] / total:6.1f}%", file=sys.stderr)
    for row in ops["ops"][:top]:
        print(f"  {row['name'][:60]:60s} {row['mean_s'] * 1e3:8.2f} ms {100 * row['total_s'] / total:6.1f}%",
              file=sys.stderr)


def run_seed(args, modes, seed):
    """This seed's suite lines and its peer line (None without --peer)."""
    init = None
    peer_args = ["--data", str(DATA), "--epochs", str(args.epochs), "--batch", str(args.batch), "--seed", str(seed)]
    peer_args += ["--threads", str(args.threads)] if args.threads else []
    peer = None
    if args.peer and args.same_init:
        init = os.path.join(tempfile.mkdtemp(prefix="resnet_tiny_"), "init.npz")
        peer = _common.run_peer(str(PEER), peer_args + ["--init-out", init])[0]
    lines = []
    for mode in modes:
        speed, accuracy, cpu_ms = train(args.epochs, args.batch, MODES[mode], seed, init,
                                        args.profile and mode == "loop_sink")
        line = _common.record("resnet", "resnet-tiny", mode, "train_images_per_s", speed,
                              f"test_acc_after_{args.epochs}_epochs", accuracy, cpu_ms_per_step=round(cpu_ms, 3),
                              batch=args.batch, seed=seed,
                              same_init=bool(init), blas_threads=args.threads or "default")
        _common.emit(line)
        lines.append(line)
    if args.peer and peer is None:
        peer = _common.run_peer(str(PEER), peer_args)[0]
    if peer is not None:
        for line in lines:
            _common.emit(_common.ratio(line, peer, accuracy_diff_vs_peer=round(line["quality"] - peer["quality"], 4),
                                       cpu_per_step_ratio=round(line["cpu_ms_per_step"] / peer["cpu_ms_per_step"], 4)))
    return lines, peer


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=1, help="run seeds seed .. seed+N-1 and compare mean accuracies")
    parser.add_argument("--modes", default="eager,loop_sink", help="comma-separated: eager, loop_sink")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS / OpenMP threads of both sides (default: the machine's cores, peer 2); 1 gives "
                             "steadier ratios on a shared machine")
    parser.add_argument("--peer", action="store_true", help="also run the PyTorch eager peer")
    parser.add_argument("--same-init", action="store_true",
                        help="with --peer: start from the peer's initial weights and replay its batches")
    parser.add_argument("--profile", action="store_true", help="print where the loop-sink step's time goes")
    args = parser.parse_args()
    if args.threads:  # before numpy loads its BLAS
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(args.threads)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; choose from {sorted(MODES)}")
    if args.same_init and not args.peer:
        parser.error("--same-init needs --peer (the initial weights come from the peer)")
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    results = [run_seed(args, modes, args.seed + k) for k in range(args.seeds)]
    if args.peer:
        emit_accuracy_comparison(args, modes, results)


def emit_accuracy_comparison(args, modes, results):
    """The mean test accuracy of each mode against the peer's over the seeds run."""
    import statistics
    peer = [p["quality"] for _, p in results]
    for k, mode in enumerate(modes):
        ours = [lines[k]["quality"] for lines, _ in results]
        _common.emit({"workload": "resnet", "name": "resnet-tiny", "accuracy_comparison": f"{mode} / peer eager",
                      "metric": f"test_acc_after_{args.epochs}_epochs",
                      "seeds": [args.seed + i for i in range(args.seeds)],
                      "same_init": args.same_init, "mstrain": ours, "peer": peer,
                      "mstrain_mean": round(statistics.mean(ours), 4), "peer_mean": round(statistics.mean(peer), 4),
                      "mean_diff": round(statistics.mean(ours) - statistics.mean(peer), 4),
                      "within_half_point": abs(statistics.mean(ours) - statistics.mean(peer)) <= 0.005})


if __name__ == "__main__":
    main()
