"""The PyTorch reference tests skip without torch, with the install hint, except where CI requires
torch (MSTRAIN_REQUIRE_TORCH=1): there a missing torch fails them instead of passing silently."""
import sys

import pytest

from ..torch_support import INSTALL_HINT, import_torch


def test_missing_torch_skips_with_the_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    monkeypatch.delenv("MSTRAIN_REQUIRE_TORCH", raising=False)
    with pytest.raises(pytest.skip.Exception, match="torch is not installed"):
        import_torch()


def test_missing_torch_fails_where_it_is_required(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setenv("MSTRAIN_REQUIRE_TORCH", "1")
    with pytest.raises(pytest.fail.Exception, match="MSTRAIN_REQUIRE_TORCH") as failure:
        import_torch()
    assert INSTALL_HINT in str(failure.value)
