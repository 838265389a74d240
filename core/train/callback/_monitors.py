"""Callbacks that report progress: LossMonitor, TimeMonitor, ProgressBar."""
import math
import sys
import time

from ._callback import Callback

__all__ = ["LossMonitor", "TimeMonitor", "ProgressBar"]


def _print(stream, text):
    print(text, file=stream if stream is not None else sys.stdout, flush=True)


class LossMonitor(Callback):
    """Print the loss every `per_print_times` steps (in sink mode: at sink ends that cross a
    multiple). A NaN or infinite loss stops training with a ValueError naming the epoch and step.

    Output: `epoch: 1 step: 5, loss is 2.3025851`
    """

    def __init__(self, per_print_times=1, stream=None):
        if not isinstance(per_print_times, int) or per_print_times < 0:
            raise ValueError(f"per_print_times must be a non-negative int, got {per_print_times!r}")
        self._per_print_times = per_print_times
        self._stream = stream
        self._last_print_step = 0

    def on_train_begin(self, run_context):
        self._last_print_step = run_context.original_args().cur_step_num

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        loss = args.loss
        if math.isnan(loss) or math.isinf(loss):
            raise ValueError(f"epoch: {args.cur_epoch_num} step: {args.cur_step_in_epoch}: "
                             f"invalid loss {loss}, terminating training")
        if self._per_print_times and args.cur_step_num - self._last_print_step >= self._per_print_times:
            self._last_print_step = args.cur_step_num
            _print(self._stream, f"epoch: {args.cur_epoch_num} step: {args.cur_step_in_epoch}, loss is {loss}")


class TimeMonitor(Callback):
    """Print the epoch time and the mean time per step at each epoch end.

    `data_size` overrides the number of steps per epoch used for the per-step figure.
    """

    def __init__(self, data_size=None, stream=None):
        if data_size is not None and (not isinstance(data_size, int) or data_size <= 0):
            raise ValueError(f"data_size must be a positive int or None, got {data_size!r}")
        self.data_size = data_size
        self._stream = stream
        self._epoch_start = None
        self._epoch_start_step = 0
        self.epoch_seconds = []  # one entry per finished epoch

    def on_train_epoch_begin(self, run_context):
        self._epoch_start = time.perf_counter()
        self._epoch_start_step = run_context.original_args().cur_step_num

    def on_train_epoch_end(self, run_context):
        args = run_context.original_args()
        seconds = time.perf_counter() - self._epoch_start
        self.epoch_seconds.append(seconds)
        steps = self.data_size or (args.cur_step_num - self._epoch_start_step) or 1
        _print(self._stream, f"epoch: {args.cur_epoch_num} time: {seconds * 1e3:.3f} ms, "
                             f"per step time: {seconds * 1e3 / steps:.3f} ms")


class ProgressBar(Callback):
    """A progress line per epoch: steps done, loss and steps/s.

    On a terminal it is one line redrawn in place (`\\r`); otherwise (logs, pipes) it prints a
    plain line every `print_every` steps and at each epoch end. `Model.train` adds one by default
    when stdout is a terminal and no LossMonitor/ProgressBar was given.
    """

    def __init__(self, print_every=50, width=30, stream=None):
        if print_every < 1:
            raise ValueError(f"print_every must be >= 1, got {print_every}")
        self.print_every = print_every
        self.width = width
        self._stream = stream
        self._epoch_start = 0.0
        self._epoch_start_step = 0
        self._last_line_step = 0

    @property
    def stream(self):
        return self._stream if self._stream is not None else sys.stdout

    def _is_tty(self):
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def on_train_epoch_begin(self, run_context):
        args = run_context.original_args()
        self._epoch_start = time.perf_counter()
        self._epoch_start_step = self._last_line_step = args.cur_step_num

    def _line(self, args):
        done = args.cur_step_in_epoch
        total = max(args.batch_num, 1)
        elapsed = max(time.perf_counter() - self._epoch_start, 1e-9)
        rate = (args.cur_step_num - self._epoch_start_step) / elapsed
        filled = int(self.width * min(done / total, 1.0))
        bar = "#" * filled + "-" * (self.width - filled)
        loss = "" if args.net_outputs is None else f" loss {args.loss:.4f}"
        return f"epoch {args.cur_epoch_num}/{args.epoch_num} [{bar}] {done}/{total}{loss} {rate:.1f} steps/s"

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        if self._is_tty():
            self.stream.write("\r" + self._line(args))
            self.stream.flush()
        elif args.cur_step_num - self._last_line_step >= self.print_every:
            self._last_line_step = args.cur_step_num
            _print(self.stream, self._line(args))

    def on_train_epoch_end(self, run_context):
        args = run_context.original_args()
        if self._is_tty():
            self.stream.write("\r" + self._line(args) + "\n")
            self.stream.flush()
        else:
            _print(self.stream, self._line(args))
