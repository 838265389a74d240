"""Small networks and data shared by the mstrain.train tests."""
import numpy as np

import mstrain as ms
from mstrain import nn
from mstrain.tensor import Tensor

D_IN, D_HIDDEN, N_CLASSES = 6, 16, 3


class MLP(nn.Cell):
    """Dense -> ReLU -> (Dropout) -> Dense."""

    def __init__(self, d_in=D_IN, d_hidden=D_HIDDEN, d_out=N_CLASSES, dropout=0.0):
        super().__init__()
        self.fc1 = nn.Dense(d_in, d_hidden)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(p=dropout) if dropout else nn.Identity()
        self.fc2 = nn.Dense(d_hidden, d_out)

    def construct(self, x):
        return self.fc2(self.drop(self.act(self.fc1(x))))


def numpy_forward(net, x):
    """The MLP's forward pass (inference mode) in plain numpy."""
    w1, b1 = net.fc1.weight.asnumpy(), net.fc1.bias.asnumpy()
    w2, b2 = net.fc2.weight.asnumpy(), net.fc2.bias.asnumpy()
    h = np.maximum(x @ w1.T + b1, 0)
    return h @ w2.T + b2


def make_data(n=48, seed=0):
    """(x, y): separable-ish 3-class data."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, D_IN)).astype(np.float32)
    w = rng.standard_normal((D_IN, N_CLASSES))
    y = (x @ w).argmax(1).astype(np.int32)
    return x, y


def as_batches(x, y, batch=8):
    """A plain list of (x, y) batches (the convenience input Model accepts)."""
    return [(x[i:i + batch], y[i:i + batch]) for i in range(0, len(x), batch)]


def make_model(seed=0, dropout=0.0, lr=0.05, metrics=None, optimizer="momentum", **model_kwargs):
    ms.set_seed(seed)
    net = MLP(dropout=dropout)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    if optimizer == "adam":
        opt = nn.Adam(net.trainable_params(), learning_rate=lr)
    else:
        opt = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=0.9)
    model = ms.Model(net, loss, opt, metrics=metrics, **model_kwargs)
    return model, net, opt


class CountingStep(nn.Cell):
    """A stand-in train network: records the id stored in each batch (x[0, 0]) and returns the
    number of steps run so far as the 'loss'."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def construct(self, x, y):
        self.seen.append(int(x.asnumpy().reshape(-1)[0]))
        return Tensor(np.float32(len(self.seen)))


def id_batches(n):
    """n batches whose x holds the batch index."""
    return [(np.full((2, 1), i, dtype=np.float32), np.zeros(2, dtype=np.int32)) for i in range(n)]


def weights(cell):
    """{name: copy of array} of every parameter (weights and optimizer state)."""
    return {p.name: p.asnumpy().copy() for p in cell.get_parameters()}
