"""The suite's random state: one global `np.random.Generator` (PCG64) behind every random op.

Random ops (dropout masks, `ops.randn`, initializers) draw from `default_generator()` at the
moment they run, so a compiled graph that re-executes a random op draws fresh numbers, and
`set_seed` makes a whole run repeatable.

The state travels through checkpoints as a **numpy uint64 array of 6 words** (`get_rng_state`):
PCG64's 128-bit state and increment (high word first) and its cached 32-bit draw. Any checkpoint
format that stores arrays stores it unchanged; `set_rng_state` also accepts the list form
(`state.tolist()`, for JSON) and numpy's own `bit_generator.state` dict.

>>> set_seed(7); a = default_generator().random()
>>> state = get_rng_state(); b = default_generator().random()
>>> set_rng_state(state); default_generator().random() == b
True
"""
import contextlib
import random as _py_random

import numpy as np

__all__ = [
    "set_seed", "get_seed", "default_generator", "get_rng_state", "set_rng_state", "seeded_generator",
    "fork", "fork_rng",
]


_MASK64 = (1 << 64) - 1
_STATE_WORDS = 6


class _Global:
    generator = np.random.Generator(np.random.PCG64())  # fresh entropy until set_seed is called
    seed = None


def set_seed(seed):
    """Seed the suite's generator (and numpy's and Python's global ones, as MindSpore does)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"set_seed: seed must be a non-negative int, got {seed!r}")
    seed = int(seed)
    _Global.generator = np.random.Generator(np.random.PCG64(seed))
    _Global.seed = seed
    np.random.seed(seed % (1 << 32))
    _py_random.seed(seed)


def get_seed():
    """The seed given to the last `set_seed`, or None when none was given."""
    return _Global.seed


def default_generator():
    """The global generator every random op draws from (look it up at call time: set_seed replaces it)."""
    return _Global.generator


def get_rng_state():
    """The global generator's state as a numpy uint64 array of 6 words (a copy: safe to store)."""
    state = _Global.generator.bit_generator.state
    inner = state["state"]
    return np.array([inner["state"] >> 64, inner["state"] & _MASK64,
                     inner["inc"] >> 64, inner["inc"] & _MASK64,
                     state["has_uint32"], state["uinteger"]], dtype=np.uint64)


def set_rng_state(state):
    """Restore a state from `get_rng_state` (array, list or Tensor) or a numpy PCG64 state dict."""
    if isinstance(state, dict):
        generator = np.random.Generator(np.random.PCG64())
        generator.bit_generator.state = state
        _Global.generator = generator
        return
    w = _state_words(getattr(state, "_data", state))
    generator = np.random.Generator(np.random.PCG64())
    generator.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": (w[0] << 64) | w[1], "inc": (w[2] << 64) | w[3]},
        "has_uint32": w[4], "uinteger": w[5],
    }
    _Global.generator = generator


def _state_words(state):
    if isinstance(state, (list, tuple)):  # the JSON form: Python ints (words may exceed int64)
        words = [int(v) for v in state]
    else:
        array = np.asarray(state)
        words = [int(v) for v in array.reshape(-1)] if np.issubdtype(array.dtype, np.integer) else []
    if len(words) != _STATE_WORDS or not all(0 <= v <= _MASK64 for v in words):
        raise ValueError(f"set_rng_state: expected {_STATE_WORDS} unsigned 64-bit words from get_rng_state, "
                         f"got {state!r}")
    return words


def seeded_generator(seed):
    """An independent PCG64 generator with its own seed (does not touch the global state)."""
    return np.random.Generator(np.random.PCG64(seed))


def fork(count=None):
    """Child generator(s) seeded from the global one: repeatable under `set_seed`, and their
    streams are independent of what the global generator draws afterwards.

    `count=None` gives one generator, an int gives a list (one per worker, env, rank...).
    """
    seeds = _Global.generator.integers(0, 1 << 63, size=1 if count is None else count)
    children = [seeded_generator(int(s)) for s in seeds]
    return children[0] if count is None else children


@contextlib.contextmanager
def fork_rng():
    """Run a block with the global generator's state saved and restored afterwards."""
    saved = get_rng_state()
    try:
        yield _Global.generator
    finally:
        set_rng_state(saved)
