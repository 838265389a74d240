"""Train the sharded_train.py model for half its steps on the ranks of this run and checkpoint it
(`save`), or load such a checkpoint (saved on any rank count) and train the second half
(`resume`); argv: out ckpt_dir save|resume [--cache ROWS] [--disk DIR] (as sharded_train.py). Rank 0 of a resume saves the second half's losses,
the final table and head."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mstrain as ms  # noqa: E402
from mstrain import Tensor, nn  # noqa: E402
from mstrain import communication as comm  # noqa: E402
from mstrain.recommender.sharded import ShardedEmbeddingLookup, ShardedTrainStep  # noqa: E402
from mstrain.recommender.sharded_checkpoint import load_sharded_table, save_sharded_table  # noqa: E402
from sharded_train import BATCH, DIM, FIELDS, ROWS, STEPS, Net, data, store_options  # noqa: E402

HALF = STEPS // 2


def main():
    out, ckpt, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    comm.init()
    rank, ranks = comm.get_rank(), comm.get_group_size()
    init, ids, ys = data()
    embedding = ShardedEmbeddingLookup(ROWS, DIM, max_batch_ids=BATCH * FIELDS,
                                       param_init=init if mode == "save" else "zeros", **store_options(rank))
    net = Net(embedding)
    dense = nn.LazyAdam(net.head.trainable_params(), learning_rate=0.01)
    table_optimizer = nn.LazyAdam([embedding.shard], learning_rate=0.01)
    step = ShardedTrainStep(net, dense, {embedding: table_optimizer})
    dense_state = {param.name: param for _, param in dense.parameters_and_names()}
    if mode == "resume":
        load_sharded_table(ckpt / "table", embedding, table_optimizer)
        for name, value in ms.load_checkpoint(str(ckpt / "dense.ckpt")).items():
            dense_state[name].set_data(Tensor(value.asnumpy()))
    per_rank = BATCH // ranks
    part = slice(rank * per_rank, (rank + 1) * per_rank)
    losses = []
    for k in range(HALF) if mode == "save" else range(HALF, STEPS):
        loss = float(step(Tensor(ids[k][part]), Tensor(ys[k][part])).asnumpy())
        losses.append(loss)
    if mode == "save":
        save_sharded_table(ckpt / "table", embedding, table_optimizer)
        if rank == 0:
            ms.save_checkpoint({name: p.asnumpy() for name, p in dense_state.items()}, str(ckpt / "dense.ckpt"))
        return
    table = embedding.full_table()
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        np.savez(out / "result.npz", losses=np.array(losses), table=table, head=net.head.weight.asnumpy())


if __name__ == "__main__":
    main()
