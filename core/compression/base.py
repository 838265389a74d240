"""`CompAlgo`: the one interface every compression algorithm implements (MindSpore Golden Stick's).

    algo = SimulatedQuantizationAwareTraining(QatConfig(freeze_bn_steps=500))
    net = algo.apply(net)                    # rewrite for training (fake-quant, knockoffs, ...)
    model.train(epochs, data, callbacks=algo.callbacks())
    deployable = algo.convert(net)           # int8 layers, hard low-bit weights, pruned channels

Each algorithm's config is a dataclass; `include` / `exclude` (cell path patterns, see
`find_cells`) choose the layers it rewrites.
"""
import abc
import dataclasses
from dataclasses import dataclass, field
from typing import List, Optional

from ..nn import Cell

__all__ = ["CompAlgo", "AlgoConfig"]


@dataclass
class AlgoConfig:
    """Layer selection shared by the algorithms: shell-style patterns over cell paths."""
    include: Optional[List[str]] = None   # None: every layer of the algorithm's types
    exclude: List[str] = field(default_factory=list)


class CompAlgo(abc.ABC):
    """Base class: `apply(net)` rewrites the network for training, `callbacks()` lists the
    training-time callbacks, `convert(net)` returns the deployable network."""

    config_class = AlgoConfig

    def __init__(self, config=None):
        if config is None:
            config = self.config_class()
        elif isinstance(config, dict):
            config = self.config_class(**config)
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__}: config must be a {self.config_class.__name__} or a dict, "
                            f"got {type(config).__name__}")
        self._check_config(config)
        self.config = config

    def _check_config(self, config):
        """Raise ValueError naming the bad field; subclasses add their own checks."""

    @abc.abstractmethod
    def apply(self, network):
        """Rewrite `network` in place for compression-aware training; returns it."""

    def callbacks(self):
        """Callbacks to pass to Model.train alongside the user's."""
        return []

    @abc.abstractmethod
    def convert(self, network):
        """The deployable network built from a network that `apply` rewrote and that was trained."""

    @staticmethod
    def _check_network(network, where):
        if not isinstance(network, Cell):
            raise TypeError(f"{where}: expected a Cell, got {type(network).__name__}")

    def describe(self):
        return f"{type(self).__name__}({dataclasses.asdict(self.config)})"
