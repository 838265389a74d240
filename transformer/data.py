"""Text data for language models: the shipped tinyshakespeare split 90/10, replayable batches.

`load_text_splits(path, tokenizer=None)` -> (train_ids, val_ids, tokenizer): the first 90% of the
characters train, the last 10% validate (W1's split). `training_windows(train_ids, steps, batch,
seq_length, seed)` draws step s's window starts with numpy.random.default_rng(seed).integers(0,
len - seq_length, size=batch), in order, so the torch peer and this kit see the same batches.
`validation_windows` cuts the validation ids into every non-overlapping window.
"""
import numpy as np

from mstrain.config import resolve_path
from mstrain.errors import DatasetNotFoundError

from .tokenizer import CharTokenizer

__all__ = ["load_text_splits", "training_windows", "validation_windows", "TRAIN_FRACTION"]

TRAIN_FRACTION = 0.9


def load_text_splits(path, tokenizer=None, key="data.path"):
    file = resolve_path(path, "text file", key=key)
    text = file.read_text(encoding="utf-8")
    if len(text) < 10:
        raise DatasetNotFoundError(f"{file}: the text has {len(text)} characters, too few to split")
    tokenizer = tokenizer or CharTokenizer.train(text)
    ids = tokenizer.encode(text)
    split = int(TRAIN_FRACTION * len(ids))
    return ids[:split], ids[split:], tokenizer


def training_windows(train_ids, steps, batch, seq_length, seed):
    """(inputs, labels), each (steps, batch, seq_length) int32; labels are inputs shifted by one."""
    if len(train_ids) <= seq_length + 1:
        raise DatasetNotFoundError(f"the training text ({len(train_ids)} tokens) is shorter than one window "
                                   f"of {seq_length + 1}")
    rng = np.random.default_rng(seed)
    starts = np.stack([rng.integers(0, len(train_ids) - seq_length, size=batch) for _ in range(steps)])
    tokens = train_ids[starts[..., None] + np.arange(seq_length + 1)].astype(np.int32)
    return tokens[..., :-1], tokens[..., 1:]


def validation_windows(val_ids, seq_length):
    """(inputs, labels), each (windows, seq_length): every non-overlapping window of the text."""
    windows = (len(val_ids) - 1) // seq_length
    if windows < 1:
        raise DatasetNotFoundError(f"the validation text ({len(val_ids)} tokens) is shorter than one window "
                                   f"of {seq_length + 1}")
    tokens = val_ids[np.arange(windows)[:, None] * seq_length + np.arange(seq_length + 1)].astype(np.int32)
    return tokens[:, :-1], tokens[:, 1:]
