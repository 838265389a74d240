"""ModelCheckpoint: save the train network (weights + optimizer state) and the resume position."""
import os
import re
import time

from .. import train_state
from ...fileio import remove_stale_temp_files
from ..serialization import save_checkpoint
from ._callback import Callback

__all__ = ["CheckpointConfig", "ModelCheckpoint"]


class CheckpointConfig:
    """When to save and how many files to keep.

    save_checkpoint_steps: save when at least this many steps passed since the last save (checked
        at each step end; in sink mode at each sink end). Takes precedence over seconds.
    save_checkpoint_seconds: save when this many seconds passed (used when steps is 0/None).
    keep_checkpoint_max: keep the newest N files of this run, delete older ones.
    keep_checkpoint_per_n_minutes: when > 0, instead keep one file per N-minute window (the first
        one saved in it) plus the newest file.
    append_info: extra entries, a list of 'epoch_num' / 'step_num' (always saved anyway) and at most
        one dict of name -> value.
    saved_network: a Cell to save instead of the train network (then no optimizer state is saved).

    Every file also carries the resume position (`'train_state'`: step, epoch, RNG state, dataset
    position), so `Model.train(..., resume_from=file)` continues exactly where the file was written.
    """

    def __init__(self, save_checkpoint_steps=1, save_checkpoint_seconds=0, keep_checkpoint_max=5,
                 keep_checkpoint_per_n_minutes=0, append_info=None, saved_network=None):
        steps = save_checkpoint_steps or 0
        seconds = save_checkpoint_seconds or 0
        if steps < 0 or seconds < 0:
            raise ValueError("save_checkpoint_steps and save_checkpoint_seconds must be >= 0")
        if not steps and not seconds:
            raise ValueError("CheckpointConfig needs save_checkpoint_steps or save_checkpoint_seconds > 0")
        if keep_checkpoint_max is not None and keep_checkpoint_max < 0:
            raise ValueError(f"keep_checkpoint_max must be >= 0, got {keep_checkpoint_max}")
        self.save_checkpoint_steps = int(steps)
        self.save_checkpoint_seconds = 0 if steps else float(seconds)
        self.keep_checkpoint_max = keep_checkpoint_max
        self.keep_checkpoint_per_n_minutes = float(keep_checkpoint_per_n_minutes or 0)
        self.append_dict = self._parse_append_info(append_info)
        self.saved_network = saved_network

    @staticmethod
    def _parse_append_info(append_info):
        extra = {}
        for item in append_info or ():
            if isinstance(item, dict):
                extra.update(item)
            elif item not in ("epoch_num", "step_num"):
                raise ValueError(f"append_info entries must be 'epoch_num', 'step_num' or a dict, got {item!r}")
        return extra


class ModelCheckpoint(Callback):
    """Save checkpoints `{directory}/{prefix}-{epoch}_{step_in_epoch}.ckpt` during training.

    If files with this prefix already exist in the directory the prefix becomes `prefix_1`,
    `prefix_2`, ... so an earlier run's files are never overwritten or rotated away.
    Writes are atomic (see mstrain.train.serialization). The last step is saved at train end.
    """

    def __init__(self, prefix="CKP", directory=None, config=None):
        if not prefix or not re.fullmatch(r"[\w.\-]+", prefix):
            raise ValueError(f"prefix must be a non-empty file-name-safe string, got {prefix!r}")
        self.config = config if config is not None else CheckpointConfig()
        if not isinstance(self.config, CheckpointConfig):
            raise TypeError(f"config must be a CheckpointConfig, got {type(self.config).__name__}")
        self._base_prefix = prefix
        self.prefix = prefix
        self.directory = os.path.abspath(directory or os.getcwd())
        self._clock = time.monotonic  # replaced in tests
        self._saved = []               # (time, path) of files written by this run, oldest first
        self._last_step = None
        self._last_time = None
        self.latest_ckpt_file_name = None

    def on_train_begin(self, run_context):
        os.makedirs(self.directory, exist_ok=True)
        self.prefix = self._free_prefix()
        self._saved = []  # rotation only ever deletes files of the current run
        self._last_time = self._clock()
        self._last_step = run_context.original_args().cur_step_num

    def _free_prefix(self):
        existing = os.listdir(self.directory)
        prefix, n = self._base_prefix, 0
        while any(f.startswith(prefix + "-") and f.endswith(".ckpt") for f in existing):
            n += 1
            prefix = f"{self._base_prefix}_{n}"
        return prefix

    def _due(self, args):
        if self.config.save_checkpoint_steps:
            return args.cur_step_num - self._last_step >= self.config.save_checkpoint_steps
        return self._clock() - self._last_time >= self.config.save_checkpoint_seconds

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        if self._due(args):
            self._save(args)

    def on_train_end(self, run_context):
        args = run_context.original_args()
        if args.cur_step_num != self._last_step:
            self._save(args)

    def _save(self, args):
        name = f"{self.prefix}-{args.cur_epoch_num}_{args.cur_step_in_epoch}.ckpt"
        path = os.path.join(self.directory, name)
        network = self.config.saved_network or args.train_network
        append = {**train_state.resume_info(args), **self.config.append_dict}
        remove_stale_temp_files(self.directory, self._base_prefix)  # left by a killed earlier run
        save_checkpoint(network, path, append_dict=append)
        now = self._clock()
        self._saved = [(t, p) for t, p in self._saved if p != path] + [(now, path)]
        self._last_step, self._last_time = args.cur_step_num, now
        self.latest_ckpt_file_name = path
        self._rotate()

    def _rotate(self):
        per_minutes = self.config.keep_checkpoint_per_n_minutes
        if per_minutes > 0:
            window = per_minutes * 60.0
            start, kept, windows = self._saved[0][0], [], set()
            for t, p in self._saved[:-1]:
                bucket = int((t - start) // window)
                if bucket in windows:
                    self._remove(p)
                else:
                    windows.add(bucket)
                    kept.append((t, p))
            self._saved = kept + self._saved[-1:]
        elif self.config.keep_checkpoint_max:
            while len(self._saved) > self.config.keep_checkpoint_max:
                self._remove(self._saved.pop(0)[1])

    @staticmethod
    def _remove(path):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass  # already gone (removed by the user): nothing to rotate
