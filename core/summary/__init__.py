"""Summaries in TensorBoard's event-file format (MindSpore's SummaryRecord and SummaryCollector).

    from mstrain.summary import SummaryRecord, SummaryCollector, read_events
    model.train(2, data, callbacks=[SummaryCollector("runs/mlp/summary", collect_freq=10)])
    read_events("runs/mlp/summary")       # [SummaryEvent(step, wall_time, tag, kind, value), ...]

Then `tensorboard --logdir runs/mlp/summary` shows them. No TensorFlow or TensorBoard is needed to
write or read the files: the protobufs and the record framing are encoded here.
"""
from .collector import SummaryCollector
from .events import SummaryEvent, read_events
from .png import decode_png, encode_png
from .record import SummaryRecord

__all__ = ["SummaryRecord", "SummaryCollector", "SummaryEvent", "read_events", "encode_png", "decode_png"]
