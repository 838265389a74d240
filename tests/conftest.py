"""Fixtures shared by every test folder (keep this file small; room-specific fixtures live in the
room's own tests)."""
import pathlib

import mstrain  # noqa: F401  (before numpy, as users should: its BLAS thread settings reach OpenBLAS)

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root():
    """The checkout's root directory (holds configs/, data/, core/)."""
    return REPO_ROOT


@pytest.fixture
def mstrain(capsys):
    """Run the `mstrain` CLI in-process: mstrain("list") -> (exit code, stdout, stderr)."""
    from mstrain.cli import main

    def run(*argv):
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
