"""Job `mlp_mnist`: an MLP on the shipped MNIST images, through the public API end to end.

    mstrain --config configs/mlp_mnist.yaml [train.epochs=3 optimizer.lr=0.002 ...]

Data: data/images/mnist/mnist_test10k.npz (x uint8 (10000, 28, 28), y int64), the first
`train_size` images for training and the last `test_size` for testing; pixels scaled to [0, 1]
then standardised with the MNIST mean/std. Network: Dense 784 -> hidden... -> 10 with ReLU,
softmax cross-entropy. Result: {"test_acc", "train_loss", "epochs", "seconds"}.
"""
import os
import time
from dataclasses import dataclass
from typing import List

import numpy as np

from .. import dataset as ds
from .. import nn, sinking
from ..config import DataConfig, JobConfig, option, resolve_path, section
from ..errors import DatasetNotFoundError
from ..log import get_logger, is_main_process
from ..registry import register_job
from .common import build_callbacks, build_optimizer, prepare_run

__all__ = ["MnistData", "MlpModel", "MlpMnistConfig", "load_mnist", "mnist_images", "build_network", "run",
           "train_image_classifier", "run_image_classifier"]


MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # of the 60k training pixels in [0, 1]
IMAGE_SIZE, NUM_CLASSES = 28 * 28, 10


@dataclass
class MnistData(DataConfig):
    """The MNIST .npz file and its train/test split."""
    path: str = option("data/images/mnist/mnist_test10k.npz",
                       ".npz with x (N, 28, 28) uint8 and y (N,) labels; relative to data.root, cwd or the repo root")
    train_size: int = option(8000, "first N images train the model", low=1)
    test_size: int = option(2000, "last N images test it (disjoint from the training images)", low=1)


@dataclass
class MlpModel:
    """The network: Dense layers with ReLU between them."""
    hidden: List[int] = option([256], "hidden layer widths between the 784 inputs and 10 outputs", low=1)


@dataclass
class MlpMnistConfig(JobConfig):
    """Config of the mlp_mnist job."""
    data: MnistData = section(MnistData)
    model: MlpModel = section(MlpModel)


def load_mnist(path, train_size, test_size, root=None):
    """((x_train, y_train), (x_test, y_test)): float32 (N, 784) standardised, int32 labels.
    A relative `path` is looked for under the dataset directory `root` first."""
    file = _under_root(path, root) or resolve_path(path, "MNIST file", key="data.path")
    with np.load(file, allow_pickle=False) as archive:
        if "x" not in archive or "y" not in archive:
            raise DatasetNotFoundError(f"{file}: expected arrays 'x' and 'y', found {sorted(archive.files)}")
        images, labels = archive["x"], archive["y"]
    if train_size + test_size > len(images):
        raise DatasetNotFoundError(f"{file} has {len(images)} images, fewer than data.train_size + "
                                   f"data.test_size = {train_size + test_size}")
    x = ((images.reshape(len(images), -1).astype(np.float32) / 255.0) - MNIST_MEAN) / MNIST_STD
    y = labels.astype(np.int32)
    return (x[:train_size], y[:train_size]), (x[len(x) - test_size:], y[len(y) - test_size:])


def _under_root(path, root):
    if not root or os.path.isabs(os.path.expanduser(str(path))):
        return None
    try:
        candidate = resolve_path(root, "dataset directory", key="data.root") / path
    except DatasetNotFoundError:
        return None
    return candidate if candidate.exists() else None


def build_network(hidden):
    """SequentialCell of Dense(784 -> hidden[0]) ReLU ... Dense(hidden[-1] -> 10)."""
    widths = [IMAGE_SIZE] + list(hidden) + [NUM_CLASSES]
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Dense(fan_in, fan_out))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.SequentialCell(layers)


@register_job("mlp_mnist", schema=MlpMnistConfig)
def run(cfg):
    """Train an MLP on MNIST and report the test accuracy."""
    (x_train, y_train), (x_test, y_test) = load_mnist(cfg.data.path, cfg.data.train_size, cfg.data.test_size,
                                                      root=cfg.data.root)
    return train_image_classifier(cfg, "mlp_mnist", lambda: build_network(cfg.model.hidden),
                                  (x_train, y_train), (x_test, y_test))


def mnist_images(cfg):
    """The job's ((x_train, y_train), (x_test, y_test)) with images shaped (N, 1, 28, 28) for conv nets."""
    (x_train, y_train), (x_test, y_test) = load_mnist(cfg.data.path, cfg.data.train_size, cfg.data.test_size,
                                                      root=cfg.data.root)
    return (x_train.reshape(-1, 1, 28, 28), y_train), (x_test.reshape(-1, 1, 28, 28), y_test)


def run_image_classifier(cfg, name, make_network):
    """A conv-net MNIST job body: the job's images through `train_image_classifier`."""
    train, test = mnist_images(cfg)
    return train_image_classifier(cfg, name, make_network, train, test)


def train_image_classifier(cfg, name, make_network, train, test):
    """Train `make_network()` (built after the run is seeded) on `train` = (images, labels) with the job's optimizer, sink and
    evaluation settings (Model.fit when train.eval_every, else Model.train), then report the
    accuracy on `test` (every rank evaluates the whole test set: the replicas hold the same
    weights). Returns the job's result dict."""
    from ..train import Model  # after the data check: a missing file fails before heavy imports
    from ..train.metrics import Accuracy

    (x_train, y_train), (x_test, y_test) = train, test
    prepare_run(cfg)
    train_set = ds.NumpySlicesDataset({"image": x_train, "label": y_train}, shuffle=cfg.data.shuffle)
    train_set = train_set.batch(cfg.train.batch_size, drop_remainder=cfg.data.drop_remainder)
    test_set = ds.NumpySlicesDataset({"image": x_test, "label": y_test}, shuffle=False,
                                     num_shards=1, shard_id=0).batch(500)

    network = make_network()
    steps_per_epoch = sinking.steps_per_epoch(cfg.train.sink_size, train_set.get_dataset_size(),
                                              cfg.train.dataset_sink_mode)
    optimizer = build_optimizer(cfg.optimizer, network.trainable_params(), cfg.train.epochs * steps_per_epoch)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(network, loss_fn, optimizer, metrics={"accuracy": Accuracy()}, amp_level=cfg.train.amp_level)

    callbacks = build_callbacks(cfg.train, name, steps_per_epoch)
    options = dict(callbacks=callbacks, dataset_sink_mode=cfg.train.dataset_sink_mode,
                   sink_size=cfg.train.sink_size, resume_from=cfg.train.resume)
    start = time.perf_counter()
    if cfg.train.eval_every:
        model.fit(cfg.train.epochs, train_set, test_set, valid_frequency=cfg.train.eval_every, **options)
    else:
        model.train(cfg.train.epochs, train_set, **options)
    seconds = time.perf_counter() - start
    accuracy = float(model.eval(test_set)["accuracy"])
    losses = callbacks[0].history.get("loss") or [None]
    if is_main_process():
        get_logger(name).info("test accuracy %.4f after %d epochs (%.1f s)", accuracy, cfg.train.epochs, seconds)
    return {"test_acc": accuracy, "epochs": cfg.train.epochs, "seconds": round(seconds, 3),
            "train_loss": losses[-1]}
