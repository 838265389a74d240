"""nn.EmbeddingLookup under semi_auto_parallel: each slice_mode trains through `Model` (the dataset
sharding itself over the ranks) to the single-process weights. argv: out steps slice_modes
(comma-separated; each mode's arrays are saved under "<mode>/<name>")
slice_mode 'uneven_rows' prints the error a 9-row table_row_slice gets instead.
One plain process runs the same script as the reference (slice_mode is then ignored)."""
import sys

import numpy as np

from _common import comm, ms, out_dir, save
from mstrain import dataset as ds
from mstrain import nn

VOCAB, DIM, FIELDS, CLASSES, GLOBAL_BATCH = 8, 4, 3, 2, 8


class FieldNet(nn.Cell):
    def __init__(self, slice_mode, ranks):
        super().__init__()
        table = np.random.default_rng(0).standard_normal((VOCAB, DIM)).astype(np.float32)
        shapes = (VOCAB // ranks,) * ranks if slice_mode == "field_slice" else None
        self.embedding = nn.EmbeddingLookup(VOCAB, DIM, param_init=ms.Tensor(table), slice_mode=slice_mode,
                                            manual_shapes=shapes, sparse=False)
        self.head = nn.Dense(FIELDS * DIM, CLASSES, weight_init="ones", bias_init="zeros")

    def construct(self, ids):
        return self.head(self.embedding(ids).reshape(ids.shape[0], FIELDS * DIM))


def main():
    out, steps, modes = out_dir(), int(sys.argv[2]), sys.argv[3].split(",")
    comm.init()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", gradients_mean=True)
    arrays = {}
    for slice_mode in modes:
        arrays.update({f"{slice_mode}/{k}": v for k, v in train(slice_mode, steps).items()})
    save(out, **arrays)


def train(slice_mode, steps):
    n = comm.get_group_size()
    if slice_mode == "uneven_rows":  # a vocabulary the ranks cannot share equally is refused up front
        try:
            nn.EmbeddingLookup(VOCAB + 1, DIM, slice_mode="table_row_slice")
        except ValueError as err:
            print("refused:", err)
        return {}
    net = FieldNet(slice_mode, n)
    rng = np.random.default_rng(3)
    data = {"ids": rng.integers(0, VOCAB, (steps * GLOBAL_BATCH, FIELDS)).astype(np.int32),
            "y": rng.integers(0, CLASSES, steps * GLOBAL_BATCH).astype(np.int32)}
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = ms.Model(net, loss_fn, nn.Momentum(net.trainable_params(), learning_rate=0.5, momentum=0.9))
    model.train(1, ds.NumpySlicesDataset(data, shuffle=False).batch(GLOBAL_BATCH // n))
    inner = model.train_network.network
    gathered = inner.last_stats.get("gathered_bytes", 0) if hasattr(inner, "last_stats") else 0
    return dict(gathered=np.array(gathered), **{p.name: p.asnumpy() for p in net.trainable_params()})


main()
