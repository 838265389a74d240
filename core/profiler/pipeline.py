"""The input pipeline's profile: per dataset operation rows, time, rows/s, and the bottleneck.

While a Profiler runs, every dataset node's row generators (`_rows`, `_batch_rows` of each Dataset
class) are wrapped: each `next()` is timed. A node's inclusive time includes its children's (they
are pulled inside it), so its own time is inclusive minus its children's; for a map with workers
that is the time spent waiting for them. A node can deliver at most rows / own time rows per
second; the node with the lowest such rate limits the pipeline and is named in one line, with what
the training step consumes (rows per step / compute seconds per step).
"""
import threading
import time

__all__ = ["install", "uninstall", "pipeline_report"]

_saved = []


def _label(node):
    name = type(node).__name__.replace("Dataset", "").lower() or "dataset"
    operations = getattr(node, "operations", None)
    if operations is not None:
        ops = ",".join(getattr(op, "__qualname__", type(op).__name__).split(".")[-1] for op in operations)
        workers = getattr(node, "num_parallel_workers", None) or 1
        return f"map({ops}) on {workers} worker{'s' if workers != 1 else ''}"
    if hasattr(node, "batch_size") and type(node).__name__ == "BatchDataset":
        return f"batch({node.batch_size})"
    return name


_active = threading.local()  # ids of the nodes whose generator runs on this thread (no double count)


def _wrap(recorder, original, batched):
    def rows(node, *args):
        generator = original(node, *args)
        if id(node) in getattr(_active, "nodes", ()):
            yield from generator  # a node's _batch_rows pulling its own _rows: counted once, outside
            return
        stats = recorder.dataset_stats(node, _label(node), [id(c) for c in getattr(node, "children", [])])
        per_item = (args[3] if batched else getattr(node, "batch_size", 1)
                    if type(node).__name__ == "BatchDataset" else 1)
        active = _active.__dict__.setdefault("nodes", set())
        while True:
            start = time.perf_counter_ns()
            active.add(id(node))
            try:
                item = next(generator)
            except StopIteration:
                stats[2] += time.perf_counter_ns() - start
                return
            finally:
                active.discard(id(node))
            stats[2] += time.perf_counter_ns() - start
            stats[1] += per_item
            yield item
    return rows


def install(recorder):
    from ..dataset.engine import Dataset
    classes, stack = [], [Dataset]
    while stack:
        cls = stack.pop()
        classes.append(cls)
        stack.extend(cls.__subclasses__())
    for cls in classes:
        for name, batched in (("_rows", False), ("_batch_rows", True)):
            original = vars(cls).get(name)
            if original is not None and not getattr(original, "__isabstractmethod__", False):
                _saved.append((cls, name, original))
                setattr(cls, name, _wrap(recorder, original, batched))


def uninstall():
    while _saved:
        cls, name, original = _saved.pop()
        setattr(cls, name, original)


def pipeline_report(recorder):
    """Per node: label, rows, own seconds, rows/s it could deliver; the bottleneck sentence."""
    stats = recorder.dataset
    nodes = []
    for key, (label, rows, inclusive_ns, children) in stats.items():
        child_ns = sum(stats[c][2] for c in children if c in stats)
        own = max(inclusive_ns - child_ns, 0) / 1e9
        nodes.append({"op": label, "rows": rows, "own_s": own, "time_per_row_s": own / rows if rows else None,
                      "rows_per_s": rows / own if own > 0 and rows else None})
    workers = _worker_utilisation(recorder)
    fills = [value / capacity for name, _, value, capacity in recorder.counters if capacity]
    queue = {"samples": len(fills), "mean_fill": sum(fills) / len(fills)} if fills else None
    report = {"ops": nodes, "workers": workers, "sink_queue": queue, "bottleneck": None, "sentence": None}
    limited = [n for n in nodes if n["rows_per_s"]]
    if not limited:
        return report
    worst = min(limited, key=lambda n: n["rows_per_s"])
    report["bottleneck"] = worst["op"]
    sentence = f"{worst['op']} limits the pipeline to {worst['rows_per_s']:.0f} rows/s"
    consume = _consumption(recorder)
    if consume is not None:
        sentence += f"; the training step consumes {consume:.0f}"
    report["sentence"] = sentence
    return report


def _consumption(recorder):
    steps = recorder.steps
    batch = next((int(label[6:-1]) for label, *_ in recorder.dataset.values() if label.startswith("batch(")), None)
    compute = [s["total"] - s["data_wait"] for s in steps]
    if not steps or batch is None or sum(compute) <= 0:
        return None
    return batch * len(steps) / sum(compute)


def _worker_utilisation(recorder):
    """Busy share of each dataset worker thread over the span of its tasks."""
    busy, spans = {}, {}
    for name, category, thread, start, duration in recorder.events:
        if category != "dataset":
            continue
        busy[thread] = busy.get(thread, 0) + duration
        lo, hi = spans.get(thread, (start, start + duration))
        spans[thread] = (min(lo, start), max(hi, start + duration))
    return {recorder.threads.get(t, str(t)): busy[t] / max(spans[t][1] - spans[t][0], 1) for t in busy}

