"""Train a table + dense head for STEPS steps with the table sharded over the ranks (or, with
--whole, one process with the whole table and the whole batch); argv: out [--whole]
[--cache ROWS] [--disk DIR] (each rank's shard behind a hot-row cache of ROWS rows, kept in
files under DIR/rank<r>). Rank 0 saves the global losses and the final table."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import mstrain as ms  # noqa: E402
from mstrain import Tensor, nn  # noqa: E402
from mstrain import communication as comm  # noqa: E402
from mstrain.recommender.sharded import ShardedEmbeddingLookup, ShardedTrainStep  # noqa: E402

ROWS, DIM, FIELDS, BATCH, STEPS = 301, 4, 3, 16, 100


class Net(nn.Cell):
    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding
        self.head = nn.Dense(FIELDS * DIM, 1, weight_init="ones", bias_init="zeros")

    def construct(self, ids, y):
        x = self.embedding(ids).reshape((ids.shape[0], FIELDS * DIM))
        return ((self.head(x).reshape((-1,)) - y) ** 2).mean()


def data():
    """(initial table, ids (STEPS, BATCH, FIELDS), targets (STEPS, BATCH)), the same on every rank."""
    rng = np.random.default_rng(0)
    init = rng.normal(scale=0.1, size=(ROWS, DIM)).astype(np.float32)
    ids = ((rng.zipf(1.2, size=(STEPS, BATCH, FIELDS)) - 1) % ROWS).astype(np.int32)
    ys = rng.normal(size=(STEPS, BATCH)).astype(np.float32)
    return init, ids, ys


def _option(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def store_options(rank):
    """ShardedEmbeddingLookup keywords of --cache / --disk for `rank`."""
    disk = _option("--disk")
    return {"vocab_cache_size": int(_option("--cache", 0)),
            "disk_dir": None if disk is None else str(Path(disk) / f"rank{rank}")}


def main():
    out, whole = Path(sys.argv[1]), "--whole" in sys.argv
    comm.init()
    rank, ranks = comm.get_rank(), comm.get_group_size()
    init, ids, ys = data()
    if whole:
        embedding = nn.EmbeddingLookup(ROWS, DIM, param_init=init)
        net = Net(embedding)
        step = nn.TrainOneStepCell(net, nn.LazyAdam(net.trainable_params(), learning_rate=0.01))
        part = slice(None)
    else:
        embedding = ShardedEmbeddingLookup(ROWS, DIM, max_batch_ids=BATCH * FIELDS, param_init=init,
                                           **store_options(rank))
        net = Net(embedding)
        dense = nn.LazyAdam(net.head.trainable_params(), learning_rate=0.01)
        step = ShardedTrainStep(net, dense, {embedding: nn.LazyAdam([embedding.shard], learning_rate=0.01)})
        per_rank = BATCH // ranks
        part = slice(rank * per_rank, (rank + 1) * per_rank)
    losses = []
    for k in range(STEPS):
        loss = float(step(Tensor(ids[k][part]), Tensor(ys[k][part])).asnumpy())
        losses.append(loss)
    table = embedding.embedding_table.asnumpy() if whole else embedding.full_table()
    if not whole:  # bytes all ranks sent, forward and backward; hit rate of the caches
        sent = comm.all_reduce_array(np.array([embedding.statistics["bytes_forward"],
                                               embedding.statistics["bytes_backward"]], np.float64))
        cache = embedding.cache.statistics if embedding.cache is not None else None
        moved = comm.all_reduce_array(np.array([0, 0] if cache is None else [cache.rows_in, cache.rows_out],
                                               np.float64))
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        extra = {} if whole else {"bytes": sent, "rows_moved": moved}
        np.savez(out / "result.npz", losses=np.array(losses), table=table, head=net.head.weight.asnumpy(), **extra)


if __name__ == "__main__":
    main()
