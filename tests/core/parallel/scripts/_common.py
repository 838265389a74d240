"""Shared pieces of the MPI test scripts: output files and a small deterministic network."""
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

import mstrain as ms  # noqa: E402
from mstrain import communication as comm  # noqa: E402
from mstrain.nn.container import SequentialCell  # noqa: E402
from mstrain.nn.layers import Dense  # noqa: E402
from mstrain.nn.loss import SoftmaxCrossEntropyWithLogits  # noqa: E402,F401  (re-exported to the scripts)


def out_dir():
    path = Path(sys.argv[1])
    path.mkdir(parents=True, exist_ok=True)
    return path


def save(path, **arrays):
    """Each rank writes <path>/rank<r>.npz."""
    np.savez(Path(path) / f"rank{comm.get_rank()}.npz", **arrays)


def mlp(sizes=(16, 32, 32, 4), seed=0):
    ms.set_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(Dense(a, b, activation="relu" if i < len(sizes) - 2 else None))
    return SequentialCell(layers)


def batches(steps, batch, features=16, classes=4, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((steps, batch, features)).astype(np.float32)
    y = rng.integers(0, classes, (steps, batch)).astype(np.int32)
    return x, y


def env_int(name, default):
    return int(os.environ.get(name, default))
