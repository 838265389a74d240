"""mstrain.kernels.native_module: the public way a kit reaches its own built C++ extension."""
import os

import pytest

from mstrain import kernels


def test_missing_extension_is_none():
    assert kernels.native_module("mstrain", "no_such_kernel_stem") is None


@pytest.mark.skipif(not kernels.native_kernels(), reason="C++ kernels are not built")
def test_built_extension_loads_and_respects_the_disable_switch(monkeypatch):
    module = kernels.native_module("mstrain", "segment")
    assert module is not None and "segment_sum" in module.KERNELS
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    assert kernels.native_module("mstrain", "segment") is None


@pytest.mark.parametrize("value, disabled", [("1", True), ("yes", True), (" TRUE ", True), ("0", False),
                                             ("no", False), ("", False), (None, False)])
def test_kernels_disabled_follows_every_write_to_the_environment(monkeypatch, value, disabled):
    """MSTRAIN_DISABLE_KERNELS is read at each call (from os.environ's own items): a value set,
    changed or removed by the process is seen at the next call."""
    from mstrain.kernels import kernels_disabled
    monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", "1")
    assert kernels_disabled()
    if value is None:
        monkeypatch.delenv("MSTRAIN_DISABLE_KERNELS")
    else:
        monkeypatch.setenv("MSTRAIN_DISABLE_KERNELS", value)
    assert kernels_disabled() is disabled
    os.environ["MSTRAIN_DISABLE_KERNELS"] = "1"  # a plain write, restored by monkeypatch
    assert kernels_disabled()
