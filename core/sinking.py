"""The `sink_size` rule (MindSpore's `Model.train`), in one place for Model, the config schema and jobs.

`sink_size = -1` sinks the whole dataset each epoch; `sink_size = N > 0` runs N steps per epoch
(the data is traversed endlessly, so an epoch may straddle passes). Any other value, 0 included,
is refused, as MindSpore refuses it.
"""
from .errors import ConfigError

WHOLE_DATASET = -1


def sink_size_problem(value):
    """Why `value` is not a valid sink_size, or None when it is."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an int (-1 or > 0), got {value!r}"
    if value != WHOLE_DATASET and value < 1:
        return f"must be -1 (the whole dataset each epoch) or > 0 (steps per epoch), got {value}"
    return None


def check_sink_size(value):
    """Raise ConfigError (a UserError: the CLI exits 2) naming `sink_size` when it is invalid."""
    problem = sink_size_problem(value)
    if problem is not None:
        raise ConfigError(problem, key="sink_size")
    return value


def steps_per_epoch(sink_size, dataset_size, dataset_sink_mode=True):
    """Steps one epoch runs: sink_size in sink mode with sink_size > 0, else the dataset's size."""
    check_sink_size(sink_size)
    return sink_size if dataset_sink_mode and sink_size != WHOLE_DATASET else dataset_size
