"""Resumable iterator positions and the prefetch thread."""
import json
import traceback

import numpy as np
import pytest

from mstrain import dataset as ds


def pipelines():
    base = {"x": np.arange(37), "y": np.arange(37) * 2}
    return {
        "source+map+batch": ds.NumpySlicesDataset(base, shuffle=True)
        .map(lambda x: x * 10, "x", num_parallel_workers=2).batch(4),
        "buffer shuffle": ds.NumpySlicesDataset(base, shuffle=False).shuffle(8).batch(3),
        "repeat+filter": ds.NumpySlicesDataset(base, shuffle=True).repeat(2)
        .filter(lambda x: x % 2 == 0, ["x"]).batch(5, drop_remainder=True),
        "zip+skip+take": ds.NumpySlicesDataset(base, shuffle=True).skip(3)
        .zip(ds.NumpySlicesDataset({"z": np.arange(40)}, shuffle=True)).take(30).batch(7),
    }


def batches(iterator, count=None):
    out = []
    for row in iterator:
        out.append([c.tolist() for c in row])
        if count is not None and len(out) == count:
            break
    return out


@pytest.mark.parametrize("name", list(pipelines()))
@pytest.mark.parametrize("prefetch", [0, 3])
def test_resume_gives_the_remaining_batches(name, prefetch):
    data = pipelines()[name]
    full = ds.TupleIterator(data, num_epochs=3, output_numpy=True, prefetch_size=prefetch)
    epochs = [batches(full) for _ in range(3)]
    for k in (0, 2, len(epochs[1]) - 1):
        it = data.create_tuple_iterator(num_epochs=3, output_numpy=True, prefetch_size=prefetch)
        batches(it)                      # epoch 0
        head = batches(it, count=k) if k else []
        state = json.loads(json.dumps(it.get_state()))
        assert state["epoch"] == 1 and state["index"] == k
        resumed = data.create_tuple_iterator(num_epochs=3, output_numpy=True, state=state,
                                             prefetch_size=prefetch)
        assert head + batches(resumed) == epochs[1]
        assert batches(resumed) == epochs[2]
        assert batches(resumed) == []    # num_epochs reached


def test_set_state_rewinds_an_iterator_and_validates():
    data = ds.NumpySlicesDataset({"x": np.arange(10)}, shuffle=True).batch(2)
    it = data.create_tuple_iterator(output_numpy=True)
    start = it.get_state()
    first = batches(it, count=3)
    it.set_state(start)
    assert batches(it, count=3) == first
    with pytest.raises(ValueError, match="keys"):
        it.set_state({"epoch": 0})


def test_epoch_end_advances_the_state():
    data = ds.NumpySlicesDataset({"x": np.arange(4)}, shuffle=False).batch(2)
    it = data.create_tuple_iterator(output_numpy=True)
    assert len(batches(it)) == 2 and it.get_state()["epoch"] == 1 and it.get_state()["index"] == 0


def _explode(x):
    if int(x) == 5:
        raise RuntimeError("bad sample 5")
    return x


@pytest.mark.parametrize("prefetch", [0, 2])
def test_producer_errors_reach_the_consumer_with_their_traceback(prefetch):
    data = ds.NumpySlicesDataset({"x": np.arange(12)}, shuffle=False).map(_explode, "x").batch(2)
    it = data.create_tuple_iterator(output_numpy=True, prefetch_size=prefetch)
    seen = []
    with pytest.raises(RuntimeError, match="bad sample 5") as info:
        for (x,) in it:
            seen.append(x.tolist())
    assert seen == [[0, 1], [2, 3]]     # whole batches only, none partial
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "_explode" in frames


def test_prefetch_thread_stops_when_iterator_is_closed():
    data = ds.NumpySlicesDataset({"x": np.arange(1000)}, shuffle=False)
    it = data.create_tuple_iterator(output_numpy=True, prefetch_size=4)
    next(it)
    producer = it._source._thread
    it.stop()
    assert not producer.is_alive()
    assert int(next(it)[0]) == 1        # the position survives stop()
