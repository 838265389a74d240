"""The embedding store: with a small hot-row cache, with LRU or LFU eviction and with the disk
level, training gives the same losses and table as one whole in-memory table."""
import warnings

import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor, nn
from mstrain.errors import ConfigError
from mstrain.recommender.store import CachedEmbeddingLookup

ROWS, DIM, FIELDS, BATCH = 500, 4, 3, 8


class _Head(nn.Cell):
    """loss = mean((sum over fields of emb(ids) . u - y)^2) with a fixed u: only the table trains."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding
        self.u = Tensor(np.linspace(-1.0, 1.0, DIM).astype(np.float32))

    def construct(self, ids, y):
        scores = (self.embedding(ids) * self.u).sum(axis=(1, 2))
        return ((scores - y) ** 2).mean()


def _batches(steps, seed=0):
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.3, size=(steps, BATCH, FIELDS)) - 1) % ROWS
    ids[:, 0, 0] = ROWS + 3  # an out-of-range id in every batch: a zero row, no gradient
    return ids.astype(np.int32), rng.normal(size=(steps, BATCH)).astype(np.float32)


def _train(embedding, make_optimizer, steps):
    optimizer = make_optimizer(embedding.trainable_params())
    if isinstance(embedding, CachedEmbeddingLookup):
        embedding.attach_optimizer(optimizer)
    step = nn.TrainOneStepCell(_Head(embedding), optimizer)
    ids, ys = _batches(steps)
    return [float(step(Tensor(i), Tensor(y)).asnumpy()) for i, y in zip(ids, ys)]


OPTIMIZERS = {
    "lazy_adam": lambda params: nn.LazyAdam(params, learning_rate=0.01),
    "ftrl": lambda params: nn.FTRL(params, learning_rate=0.1, l1=1e-3, l2=1e-3),
    "adagrad": lambda params: nn.Adagrad(params, learning_rate=0.05),
}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("policy,capacity,disk", [("lru", BATCH * FIELDS, None), ("lfu", 40, None),
                                                  ("lru", 64, "log"), ("lfu", 40, "in_place")])
def test_cached_training_equals_the_whole_table(tmp_path, optimizer, policy, capacity, disk):
    init = np.random.default_rng(1).normal(scale=0.1, size=(ROWS, DIM)).astype(np.float32)
    whole = nn.EmbeddingLookup(ROWS, DIM, param_init=init)
    reference = _train(whole, OPTIMIZERS[optimizer], 100)
    cached = CachedEmbeddingLookup(ROWS, DIM, vocab_cache_size=capacity, param_init=init, cache_policy=policy,
                                   disk_dir=str(tmp_path / "store") if disk else None, disk_layout=disk or "log")
    losses = _train(cached, OPTIMIZERS[optimizer], 100)
    np.testing.assert_allclose(losses, reference, rtol=0, atol=1e-6)
    np.testing.assert_allclose(cached.full_table(), whole.embedding_table.asnumpy(), rtol=0, atol=1e-6)
    stats = cached.statistics
    assert stats.rows_out > 0 and stats.hits > 0 and stats.rows_in == stats.misses
    if disk == "in_place":
        assert (tmp_path / "store" / "values.f32").stat().st_size == ROWS * DIM * 4
    elif disk == "log":  # the base file holds the initial rows, the log every row written back since
        assert (tmp_path / "store" / "values.base").stat().st_size == ROWS * DIM * 4
        assert cached.store.tables["values"].disk_bytes >= stats.rows_out * (DIM + 2) * 4


def test_lru_and_lfu_evict_what_they_say():
    init = np.zeros((10, 2), np.float32)
    lru = CachedEmbeddingLookup(10, 2, vocab_cache_size=3, param_init=init, cache_policy="lru")
    lfu = CachedEmbeddingLookup(10, 2, vocab_cache_size=3, param_init=init, cache_policy="lfu")
    for cache in (lru, lfu):
        for ids in ([1], [1], [1], [2], [3], [4]):  # 1 is used most, least recently of the three
            cache.make_resident(np.array(ids))
    assert sorted(lru.row_of_slot.tolist()) == [2, 3, 4]  # LRU dropped 1
    assert sorted(lfu.row_of_slot.tolist()) == [1, 3, 4]  # LFU dropped 2 (one use, older than 3)
    assert lru.statistics.as_dict()["hit_rate"] == pytest.approx(2 / 6)


def test_capacity_below_a_batch_is_refused():
    cache = CachedEmbeddingLookup(100, 2, vocab_cache_size=4)
    with pytest.raises(ConfigError, match="5 distinct rows but vocab_cache_size is 4"):
        cache.make_resident(np.arange(5))
    with pytest.raises(ConfigError, match="vocab_cache_size"):
        CachedEmbeddingLookup(100, 2, vocab_cache_size=0)


def test_evaluation_reads_rows_beyond_the_cache_capacity():
    init = np.random.default_rng(2).normal(size=(ROWS, DIM)).astype(np.float32)
    cached = CachedEmbeddingLookup(ROWS, DIM, vocab_cache_size=30, param_init=init)
    _train(cached, OPTIMIZERS["lazy_adam"], 5)
    cached.set_train(False)
    everything = np.arange(-1, ROWS + 1)
    rows = cached(Tensor(everything)).asnumpy()
    np.testing.assert_array_equal(rows[1:-1], cached.full_table())
    np.testing.assert_array_equal(rows[[0, -1]], 0.0)
    assert not np.array_equal(cached.full_table(), init)  # the trained rows are the ones read


class _Losses(ms.train.callback.Callback):
    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_step_end(self, run_context):
        self.losses += [float(np.asarray(o.asnumpy())) for o in run_context.original_args().step_outputs]


def _sink_training(tmp_path, prefetch, init):
    from mstrain import dataset as ds
    from mstrain.recommender.prefetch import prefetch_rows
    cached = CachedEmbeddingLookup(ROWS, DIM, vocab_cache_size=40, param_init=init, cache_policy="lru",
                                   disk_dir=str(tmp_path / f"store_{prefetch}"))
    optimizer = OPTIMIZERS["lazy_adam"](cached.trainable_params())
    cached.attach_optimizer(optimizer)
    ids, ys = _batches(40)
    data = ds.NumpySlicesDataset({"ids": ids.reshape(-1, FIELDS), "y": ys.reshape(-1)}, shuffle=False).batch(BATCH)
    if prefetch:
        data = prefetch_rows(data, {cached: ("ids",)})
    record = _Losses()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cached step runs eagerly in sink mode (host decisions)
        ms.Model(nn.TrainOneStepCell(_Head(cached), optimizer)).train(
            2, data, callbacks=[record], dataset_sink_mode=True, sink_size=7)
    return record.losses, np.array(cached.full_table()), cached.statistics


def test_next_batch_prefetch_in_sink_mode_trains_the_same(tmp_path):
    init = np.random.default_rng(3).normal(scale=0.1, size=(ROWS, DIM)).astype(np.float32)
    plain_losses, plain_table, plain = _sink_training(tmp_path, False, init)
    losses, table, staged = _sink_training(tmp_path, True, init)
    assert len(losses) == 14
    np.testing.assert_array_equal(losses, plain_losses)
    np.testing.assert_array_equal(table, plain_table)
    assert plain.rows_staged == 0 and staged.rows_out > 0
    # every miss but the first batch's came from the staging area (the batch after it was announced)
    first = np.unique(_batches(40)[0][0])
    assert staged.rows_staged == staged.misses - np.count_nonzero(first < ROWS) > 0
    assert staged.as_dict()["hits"] == plain.hits


def test_prefetch_rows_names_a_missing_column():
    from mstrain import dataset as ds
    from mstrain.recommender.prefetch import prefetch_rows
    data = ds.NumpySlicesDataset({"ids": np.zeros((4, 2), np.int32)}, shuffle=False).batch(2)
    with pytest.raises(ValueError, match="no column 'dense_ids'"):
        prefetch_rows(data, {CachedEmbeddingLookup(10, 2, 4): ("ids", "dense_ids")})


def test_rows_evicted_and_needed_next_are_staged_after_their_write_back(tmp_path):
    # two disjoint batches in turn through a cache that holds one: every step evicts exactly the
    # rows the next step needs, so the next batch's staging must read them after their write-back
    init = np.random.default_rng(4).normal(size=(ROWS, DIM)).astype(np.float32)
    first, second = np.arange(BATCH * FIELDS).reshape(BATCH, FIELDS), np.arange(BATCH * FIELDS, 2 * BATCH * FIELDS)
    batches = [first, second.reshape(BATCH, FIELDS)] * 6
    ys = np.random.default_rng(5).normal(size=(len(batches), BATCH)).astype(np.float32)
    results = []
    for embedding in (nn.EmbeddingLookup(ROWS, DIM, param_init=init),
                      CachedEmbeddingLookup(ROWS, DIM, BATCH * FIELDS, param_init=init, disk_dir=str(tmp_path))):
        optimizer = nn.Adagrad(embedding.trainable_params(), learning_rate=0.1)
        if isinstance(embedding, CachedEmbeddingLookup):
            embedding.attach_optimizer(optimizer)
            for ids in batches:
                embedding.announce(ids)
        step = nn.TrainOneStepCell(_Head(embedding), optimizer)
        losses = [float(step(Tensor(ids.astype(np.int32)), Tensor(y)).asnumpy()) for ids, y in zip(batches, ys)]
        table = embedding.full_table() if isinstance(embedding, CachedEmbeddingLookup) else \
            embedding.embedding_table.asnumpy()
        results.append((losses, np.array(table)))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=0, atol=1e-6)
    assert embedding.statistics.rows_out == (len(batches) - 1) * BATCH * FIELDS
    assert embedding.statistics.rows_staged == (len(batches) - 1) * BATCH * FIELDS


def test_recency_queue_pops_what_a_full_sort_by_last_use_gives():
    """The LRU queue against a numpy reference: the `count` slots with the oldest last use
    (ties by the order of use), over many steps of random touches, through compactions."""
    from mstrain.recommender.lru import RecencyQueue
    rng = np.random.default_rng(0)
    capacity = 50
    queue, last_use = RecencyQueue(capacity), np.full(capacity, -1, np.int32)
    order = np.zeros(capacity, np.int64)  # reference: a global sequence number of each slot's last use
    sequence = 0
    for clock in range(1, 400):
        used = rng.choice(capacity, size=rng.integers(1, 12), replace=False)
        count = int(rng.integers(0, 5))
        if clock > 10 and count:
            evictable = np.setdiff1d(np.flatnonzero(last_use >= 0), used)
            want = evictable[np.argsort(order[evictable], kind="stable")][:count]
            saved = last_use[used].copy()
            last_use[used] = -1
            got = queue.pop_oldest(count, last_use)
            last_use[used] = saved
            np.testing.assert_array_equal(got, want)
            used = np.concatenate([used, got])  # the evicted slots are refilled and used this step
        last_use[used] = clock
        order[used] = sequence + np.arange(used.size)
        sequence += used.size
        queue.touch(used, clock, last_use)
    assert queue.slots.size == capacity + 1024  # compacted in place, never grown
