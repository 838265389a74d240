"""mstrain.kernels.native_module: the public way a kit reaches its own built C++ extension."""
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
