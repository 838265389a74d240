"""Fixtures of the mstrain.train tests."""
import pytest

from mstrain.train import runner as runner_module


@pytest.fixture
def eager_sink(monkeypatch):
    """Sink mode with the eager runner instead of the compiled one: for tests whose stand-in
    train networks (Python side effects per step) are about the loop, not about compilation."""
    monkeypatch.setattr(runner_module, "GraphSinkRunner", runner_module.EagerRunner)
