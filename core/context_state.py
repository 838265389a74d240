"""The context's values (mode, fusion, graph dumps), low in the house so that the graph compiler,
the graph runner and Cell read them without importing the public `mstrain.context` API above them."""
from .errors import ConfigError

GRAPH_MODE = 0
PYNATIVE_MODE = 1

_DEFAULTS = {
    "mode": PYNATIVE_MODE,
    "enable_graph_kernel": True,
    "device_target": "CPU",
    "device_id": 0,
    "save_graphs": False,
    "save_graphs_path": ".",
}
# MindSpore scripts name the device; the CPU is the only one (device 0), so other values are refused
_CHOICES = {"mode": (GRAPH_MODE, PYNATIVE_MODE), "device_target": ("CPU",), "device_id": (0,)}


class _State:
    """The context values, and the hook `Cell.__call__` reads (set while GRAPH_MODE is on)."""
    values = dict(_DEFAULTS)
    cell_runner = None


STATE = _State()


def check_key(key, value):
    """Raise ConfigError naming `key` when it is unknown or `value` is not one it accepts."""
    if key not in _DEFAULTS:
        raise ConfigError(f"unknown context key {key!r}; known: {', '.join(sorted(_DEFAULTS))}",
                          source="set_context", key=key)
    choices = _CHOICES.get(key)
    if choices is not None and value not in choices:
        raise ConfigError(f"{key} must be one of {choices}, got {value!r}", source="set_context", key=key)
    if key in ("enable_graph_kernel", "save_graphs") and not isinstance(value, (bool, int)):
        raise ConfigError(f"{key} must be a bool, got {value!r}", source="set_context", key=key)


def get_context(key):
    """The value of one context key."""
    if key not in _DEFAULTS:
        raise ConfigError(f"unknown context key {key!r}; known: {', '.join(sorted(_DEFAULTS))}",
                          source="get_context", key=key)
    return STATE.values[key]
