"""Observability of a job run from a config, in one place for every job (the CLI calls `observed_run`).

Config keys (in every job's schema, `mstrain.config.schema.JobConfig`):
    profile=true          a Profiler around the whole job: <run dir>/profiler/
    summary_freq=N        a SummaryCollector on every Model.train of the job: <run dir>/summary/,
                          with the composed config as the text summary 'config'
    dump=FILE             a Dumper (mstrain.dump) with that dump config around the job

The run directory is `<train.output_dir>/<job>`; it also receives config.yaml (the composed
config), result.json (what the job returned) and graph.json / repeated_subgraphs.json (the forward
graph captured on the first step, with Cell scopes) and lineage.json (mstrain.lineage), so
`mstrain report <run dir>` and `mstrain lineage <run dirs>` can show the run.
Callbacks registered here are added by `Model.train`/`Model.fit` to the user's callbacks
(`ambient_callbacks`), so jobs need no code for it. A job with its own training loop reports its
steps through `TrainingSteps` (profiler step boundaries, summaries, graph, lineage, dump steps).
"""
import contextlib
import dataclasses
import json
import os

__all__ = ["observed_run", "ambient_callbacks", "run_dir_of", "TrainingSteps"]

_AMBIENT = []


def ambient_callbacks():
    """Callbacks every Model.train/fit of the current observed run adds (none outside one)."""
    return list(_AMBIENT)


def run_dir_of(cfg):
    return os.path.join(cfg.train.output_dir, cfg.job or "run")


def _config_text(cfg):
    import yaml
    return yaml.safe_dump(_plain(dataclasses.asdict(cfg)), sort_keys=False)


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@contextlib.contextmanager
def observed_run(cfg):
    """Set up what the config's observability keys ask for around one job run; yields a function
    `finish(result)` that writes result.json (and the profiler's files)."""
    from .fileio import write_bytes_atomically, write_json_atomically
    from .log import is_main_process

    profile = bool(getattr(cfg, "profile", False))
    summary_freq = int(getattr(cfg, "summary_freq", 0) or 0)
    dump = getattr(cfg, "dump", "") or ""
    if profile and dump:
        from .errors import ConfigError
        raise ConfigError("profile=true and dump=... cannot run together (dumping would be profiled); "
                          "choose one", key="dump")
    if not profile and not summary_freq and not dump:
        yield lambda result: None
        return
    dumper = None
    if dump:
        from .dump import Dumper
        dumper = Dumper(dump)  # reads and checks the dump config before anything starts
    run_dir = run_dir_of(cfg)
    os.makedirs(run_dir, exist_ok=True)
    text = _config_text(cfg)
    if is_main_process():
        write_bytes_atomically(os.path.join(run_dir, "config.yaml"), text.encode("utf-8"))
    profiler = collector = None
    if summary_freq:
        from .summary import SummaryCollector
        collector = SummaryCollector(os.path.join(run_dir, "summary", _rank_folder()), collect_freq=summary_freq)
        collector.add_text("config", text)
        _AMBIENT.append(collector)
    if is_main_process():
        from .lineage import LineageRecorder
        from .report import GraphCapture
        _AMBIENT.append(GraphCapture(run_dir, summary=collector))
        _AMBIENT.append(LineageRecorder(run_dir, config=_plain(dataclasses.asdict(cfg))))
    if profile:
        from .profiler import Profiler
        profiler = Profiler(output_path=run_dir)
    if dumper is not None:
        dumper.start()

    def finish(result):
        if is_main_process():
            from .lineage import update_lineage
            result = _jsonable(result or {})
            write_json_atomically(os.path.join(run_dir, "result.json"), result)
            numbers = {k: v for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            update_lineage(run_dir, metrics=numbers, config=_plain(dataclasses.asdict(cfg)))

    try:
        yield finish
    finally:
        if collector is not None:
            collector.close()
        del _AMBIENT[:]
        if profiler is not None:
            profiler.analyse()
        if dumper is not None:
            dumper.stop()


def _rank_folder():
    from .profiler.profiler import _rank_and_size
    rank, size = _rank_and_size()
    return "" if size == 1 else f"rank{rank}"


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        if isinstance(value, dict):
            return {str(k): _jsonable(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [_jsonable(v) for v in value]
        try:
            return float(value)
        except (TypeError, ValueError):
            return str(value)


class TrainingSteps:
    """A hand-written training loop, seen by the run's observers as Model.train is.

        steps = TrainingSteps(network=net, optimizer=opt, callbacks=[...])
        for epoch in range(epochs):
            with steps.step(inputs=(x, edges, labels)) as step:
                step.loss = train_one_step()
        steps.end(eval_results={"accuracy": acc})

    Each `step` is one training step: it is a profiler step (its ops are timed and broken down), the
    step a dump selects by number, and it fires on_train_step_begin/end of the given callbacks and of
    the run's observers (summaries, the graph capture on `inputs[:-1]`, lineage).
    """

    def __init__(self, network=None, optimizer=None, loss_fn=None, callbacks=None):
        from .train.callback import CallbackList, RunContext
        from .train.callback._callback import RunContextArgs
        self.args = RunContextArgs(epoch_num=1, cur_epoch_num=1, network=network, optimizer=optimizer,
                                   loss_fn=loss_fn, train_network=network)
        self.callbacks = CallbackList(list(callbacks or []) + ambient_callbacks())
        self.context = RunContext(self.args)
        self.callbacks.on_train_begin(self.context)
        self._ended = False

    @contextlib.contextmanager
    def step(self, inputs=None):
        """One training step; set `.loss` on the yielded object to report the step's loss."""
        from .ops.primitive import dispatch
        record = _StepRecord()
        observer = dispatch.profiler
        feed = observer.timed_batches([inputs]) if observer is not None else None
        if feed is not None:
            next(feed)
        self.callbacks.on_train_step_begin(self.context)
        yield record
        if feed is not None:
            for _ in feed:  # closes the step
                pass
            observer.finish_round_trip()
        args = self.args
        args.cur_step_num += 1
        args.cur_step_in_epoch += 1
        args.batch_num = args.cur_step_in_epoch
        args.last_batch = inputs
        from .tensor import Tensor
        import numpy as np
        loss = record.loss if record.loss is None or isinstance(record.loss, Tensor) else Tensor(np.asarray(record.loss))
        args.net_outputs = loss
        args.step_outputs = [loss] if loss is not None else []
        self.callbacks.on_train_step_end(self.context)

    def end(self, eval_results=None):
        """The end of training (once): on_train_epoch_end with `eval_results`, then on_train_end."""
        if self._ended:
            return
        self._ended = True
        self.args.eval_results = dict(eval_results or {})
        self.callbacks.on_train_epoch_end(self.context)
        self.callbacks.on_train_end(self.context)


class _StepRecord:
    loss = None
