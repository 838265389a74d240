"""BatchStream (endless, resumable) and DataSinkQueue (background prefetch)."""
import threading
import traceback

import numpy as np
import pytest

import mstrain as ms
from mstrain.train.dataset_helper import BatchStream, DataSinkQueue

from .nets import CountingStep, id_batches

# Stand-in train networks record each step in Python: run sink mode eagerly.
pytestmark = pytest.mark.usefixtures("eager_sink")


def _ids(batches):
    return [int(b[0].reshape(-1)[0]) for b in batches]


def test_stream_wraps_across_passes_and_resumes_from_state():
    stream = BatchStream(id_batches(4))
    assert stream.size == 4
    assert _ids(stream.take(6)) == [0, 1, 2, 3, 0, 1]
    state = stream.get_state()
    assert (state["passes"], state["index"]) == (1, 2)
    other = BatchStream(id_batches(4))
    other.set_state(state)
    assert _ids(other.take(4)) == [2, 3, 0, 1]


def _shuffled_dataset():
    x = np.arange(20, dtype=np.float32).reshape(20, 1)
    return ms.dataset.NumpySlicesDataset({"x": x, "y": np.zeros(20, np.int32)}, shuffle=True).batch(4)


def test_stream_over_shuffled_core_dataset_resumes_exactly():
    ms.set_seed(3)
    reference = [b[0].ravel().tolist() for b in BatchStream(_shuffled_dataset()).take(13)]
    assert reference[:5] != reference[5:10]  # reshuffled per pass
    assert sorted(sum(reference[:5], [])) == list(range(20))
    ms.set_seed(3)
    first = BatchStream(_shuffled_dataset())
    head = [b[0].ravel().tolist() for b in first.take(7)]
    state = first.get_state()
    ms.set_seed(99)  # a fresh process with another seed: the state carries the run's seed
    second = BatchStream(_shuffled_dataset())
    second.set_state(state)
    tail = [b[0].ravel().tolist() for b in second.take(6)]
    assert head + tail == reference


def test_seek_jumps_whole_passes():
    ms.set_seed(3)
    reference = [b[0].ravel().tolist() for b in BatchStream(_shuffled_dataset()).take(12)]
    ms.set_seed(3)
    stream = BatchStream(_shuffled_dataset())
    stream.seek(7)
    assert [b[0].ravel().tolist() for b in stream.take(5)] == reference[7:]
    plain = BatchStream(id_batches(3))
    plain.seek(4)
    assert _ids(plain.take(2)) == [1, 2]


class _RecordingStream:
    """A stream that notes the thread producing each batch and signals when `signal_at` are made."""

    def __init__(self, signal_at=3, fail_at=None):
        self.size = 100
        self.count = 0
        self.threads = set()
        self.made = threading.Event()
        self.signal_at = signal_at
        self.fail_at = fail_at

    def __next__(self):
        self.threads.add(threading.get_ident())
        if self.count == self.fail_at:
            _broken_transform(self.count)
        batch = (np.full((2, 2), self.count, np.float32), np.arange(2))
        self.count += 1
        if self.count >= self.signal_at:
            self.made.set()
        return batch

    def get_state(self):
        return {"count": self.count}


def _broken_transform(i):
    raise ValueError(f"bad sample in batch {i}")


def test_queue_prefetches_on_a_background_thread_while_the_consumer_holds_a_batch():
    stream = _RecordingStream(signal_at=4)
    with DataSinkQueue(stream, capacity=4) as feed:
        first = feed.get()
        # The consumer has taken one batch and does nothing: the producer still fills the queue.
        assert stream.made.wait(timeout=10)
        assert stream.threads == {feed.producer_thread.ident}
        assert threading.get_ident() not in stream.threads
        assert float(first[0][0, 0]) == 0 and first[0].shape == (2, 2) and first[1].shape == (2,)
        # The position is the consumer's, not the producer's (which ran ahead).
        assert feed.get_state() == {"count": 1}
        assert [float(b[0][0, 0]) for b in feed.take(3)] == [1, 2, 3]
        assert feed.get_state() == {"count": 4}
    assert not feed.producer_thread.is_alive()


def test_producer_exception_surfaces_with_its_original_traceback():
    with DataSinkQueue(_RecordingStream(fail_at=2), capacity=2) as feed:
        assert [float(b[0][0, 0]) for b in feed.take(2)] == [0, 1]
        with pytest.raises(ValueError, match="bad sample in batch 2") as info:
            feed.get()
        frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
        assert "_broken_transform" in frames and "_produce" in frames
        with pytest.raises(ValueError):  # stays failed
            feed.get()


def test_empty_dataset_is_rejected():
    with pytest.raises(ValueError, match="empty"):
        BatchStream([])


def _explode_on_seven(x):
    if float(np.asarray(x).ravel()[0]) == 7:
        raise RuntimeError("cannot decode sample 7")
    return x


def test_model_sink_mode_feeds_through_the_queue_and_reraises_pipeline_errors(monkeypatch):
    from mstrain.train import model as model_module

    made = []

    class CountingQueue(DataSinkQueue):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(model_module, "DataSinkQueue", CountingQueue)
    step = CountingStep()
    ms.Model(step).train(1, id_batches(3))
    assert made == []  # non-sink: no prefetch thread, one host round trip per step
    ms.Model(step).train(1, id_batches(3), dataset_sink_mode=True)
    assert made == []  # a list of ready batches: nothing to prefetch
    ready = ms.dataset.NumpySlicesDataset({"x": np.zeros((3, 1), np.float32), "y": np.zeros((3, 1), np.int32)},
                                          shuffle=False).batch(1)
    ms.Model(step).train(1, ready, dataset_sink_mode=True)
    assert len(made) == 1 and not made[0].producer_thread.is_alive()

    x = np.arange(10, dtype=np.float32).reshape(10, 1, 1)
    data = ms.dataset.NumpySlicesDataset({"x": x, "y": np.zeros((10, 1), np.int32)}, shuffle=False)
    data = data.map(_explode_on_seven, input_columns="x")
    with pytest.raises(RuntimeError, match="cannot decode sample 7") as info:
        ms.Model(CountingStep()).train(1, data, dataset_sink_mode=True)
    assert "_explode_on_seven" in [f.name for f in traceback.extract_tb(info.value.__traceback__)]
