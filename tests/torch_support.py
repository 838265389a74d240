"""torch for the reference tests that compare with PyTorch.

The package never depends on torch; the test extra `torch-tests` installs the CPU wheel and
`.ci/run` installs it and sets MSTRAIN_REQUIRE_TORCH=1. Elsewhere the reference tests are
skipped with the reason; under MSTRAIN_REQUIRE_TORCH=1 a missing torch fails them instead, so CI
cannot pass by silently skipping them.
"""
import os

import pytest

INSTALL_HINT = 'pip install -e ".[torch-tests]" (the CPU torch wheel) to run the PyTorch reference tests'


def import_torch():
    """The torch module; skips the calling test (or module) when it is not installed."""
    try:
        import torch
    except ImportError as error:
        if os.environ.get("MSTRAIN_REQUIRE_TORCH", "").strip() not in ("", "0"):
            pytest.fail(f"MSTRAIN_REQUIRE_TORCH is set but torch cannot be imported ({error}); {INSTALL_HINT}",
                        pytrace=False)
        pytest.skip(f"torch is not installed: {INSTALL_HINT}", allow_module_level=True)
    return torch
