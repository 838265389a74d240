"""Per-row random generators for random transforms, so results do not depend on worker timing.

A map node runs each row under `row_rng((seed, pass, node, row))`; a random transform calls
`current_rng()` and gets a generator that is a pure function of that key (created lazily, only
when a transform asks). Outside a pipeline the transforms use one module-level generator
seeded from the dataset seed.
"""
import contextlib
import threading

import numpy as np

from . import config

_local = threading.local()
_fallback = {"generator": None}


@contextlib.contextmanager
def row_rng(key):
    """Make `current_rng()` return the generator for `key` (a tuple of ints) inside the block."""
    saved = (getattr(_local, "key", None), getattr(_local, "generator", None))
    _local.key, _local.generator = key, None
    try:
        yield
    finally:
        _local.key, _local.generator = saved


def current_rng():
    """The generator a random transform should draw from now."""
    key = getattr(_local, "key", None)
    if key is None:
        if _fallback["generator"] is None:
            _fallback["generator"] = np.random.default_rng(config.get_seed())
        return _fallback["generator"]
    if _local.generator is None:
        _local.generator = np.random.default_rng(list(key))
    return _local.generator
