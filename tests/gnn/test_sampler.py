"""Neighbour-sampled mini-batches on a synthetic graph of one million nodes built here."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, nn
from mstrain.ops import functional as F
from mstrain.gnn import Graph, GraphSAGE, NeighborSampler, SparsePattern

NODES, FEATURES, CLASSES = 1_000_000, 8, 4


@pytest.fixture(scope="module")
def big_graph():
    """In-degrees 0..12 (about 6M edges) drawn at random; features Gaussian; the label of a node is
    the argmax of a fixed linear map of its own features plus its neighbours' mean (learnable)."""
    rng = np.random.default_rng(0)
    degree = rng.integers(0, 13, NODES)
    indptr = np.zeros(NODES + 1, np.int64)
    np.cumsum(degree, out=indptr[1:])
    indices = rng.integers(0, NODES, int(indptr[-1]))
    pattern = SparsePattern(indptr, indices, (NODES, NODES))
    x = rng.standard_normal((NODES, FEATURES)).astype(np.float32)
    labels = np.argmax(x @ rng.standard_normal((FEATURES, CLASSES)), axis=1)
    return pattern, x, labels


def test_fanouts_respected_and_sampled_nodes_are_real_neighbours(big_graph):
    pattern, _, _ = big_graph
    sampler = NeighborSampler(pattern, fanouts=[5, 3], batch_size=300, generator=np.random.default_rng(1))
    seeds = np.random.default_rng(2).choice(NODES, 300, replace=False)
    batch = sampler.sample(seeds)
    assert batch.batch_size == 300 and np.array_equal(batch.seeds, seeds)
    assert len(batch.blocks) == 2 and batch.blocks[1].shape[0] == 300
    assert batch.blocks[0].shape == (batch.blocks[1].shape[1], batch.n_id.shape[0])
    # Sources of each block start with its targets; block 0 reads every input node.
    targets = batch.n_id[:batch.blocks[0].shape[0]]
    assert np.array_equal(batch.n_id[:300], seeds)
    for block, fanout, target_ids in ((batch.blocks[1], 3, seeds), (batch.blocks[0], 5, targets)):
        degrees = pattern.degree[target_ids]
        assert np.array_equal(block.degree, np.minimum(degrees, fanout))
        for row in range(block.shape[0]):
            picked = batch.n_id[block.indices[block.indptr[row]:block.indptr[row + 1]]]
            start, end = pattern.indptr[target_ids[row]], pattern.indptr[target_ids[row] + 1]
            neighbours = pattern.indices[start:end]
            assert np.isin(picked, neighbours).all()
            # Without replacement: a neighbour id appears at most as often as in the graph.
            values, counts = np.unique(picked, return_counts=True)
            available = np.array([(neighbours == v).sum() for v in values])
            assert (counts <= available).all()
    assert len(np.unique(batch.n_id)) == batch.n_id.shape[0]


def test_sampling_is_uniform_over_neighbours():
    """A hub with 10 in-neighbours, fan-out 2: each neighbour is drawn about 1/5 of the time."""
    edge_index = np.stack([np.arange(1, 11), np.zeros(10, int)])
    sampler = NeighborSampler(Graph(edge_index, 11), fanouts=[2], generator=np.random.default_rng(3))
    counts = np.zeros(11)
    for _ in range(2000):
        batch = sampler.sample(np.array([0]))
        assert batch.blocks[0].nnz == 2
        counts[batch.n_id[1:]] += 1
    assert np.allclose(counts[1:] / 2000, 0.2, atol=0.04)


def test_iteration_covers_every_seed_once(big_graph):
    pattern, _, _ = big_graph
    seeds = np.arange(0, NODES, 997)
    sampler = NeighborSampler(pattern, fanouts=[2], batch_size=256, seeds=seeds,
                              generator=np.random.default_rng(4))
    seen = np.concatenate([batch.seeds for batch in sampler])
    assert len(sampler) == -(-seeds.size // 256) and np.array_equal(np.sort(seen), seeds)


def test_a_few_training_steps_reduce_the_loss(big_graph):
    pattern, x, labels = big_graph
    ms.set_seed(5)
    train_nodes = np.random.default_rng(6).choice(NODES, 4096, replace=False)
    sampler = NeighborSampler(pattern, fanouts=[10, 5], batch_size=512, seeds=train_nodes,
                              generator=np.random.default_rng(7))
    model = GraphSAGE(FEATURES, 32, CLASSES, num_layers=2, dropout=0.0)
    optimizer = nn.Adam(model.trainable_params(), learning_rate=0.02)

    def loss_fn(features, blocks, target):
        logits = model(features, blocks)
        return F.mean(F.softmax_cross_entropy(logits, target))

    step = ms.value_and_grad(loss_fn, None, model.trainable_params())
    model.set_train(True)
    losses = []
    for _ in range(2):  # epochs over the 4096 training nodes
        for batch in sampler:
            loss, grads = step(Tensor(x[batch.n_id]), batch.blocks, Tensor(labels[batch.seeds].astype(np.int32)))
            optimizer(grads)
            losses.append(float(loss.asnumpy()))
    assert np.isfinite(losses).all()
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.2, losses
