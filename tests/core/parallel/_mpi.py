"""Run a script of `scripts/` under `mpiexec -n N` with a time limit, so a hang fails the test."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
MPIEXEC = Path(sys.executable).parent / "mpiexec"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env.pop("PMI_RANK", None)
    env.pop("PMI_SIZE", None)
    return env


def run_mpi(script, n, *args, timeout=120, check=True):
    """`mpiexec -n n python scripts/<script> args...`; returns the CompletedProcess."""
    cmd = [str(MPIEXEC), "-n", str(n), sys.executable, str(SCRIPTS / script), *map(str, args)]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {proc.returncode}\n"
                             f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    return proc


def run_single(script, *args, timeout=120):
    """The same script as one plain process (no mpiexec)."""
    cmd = [sys.executable, str(SCRIPTS / script), *map(str, args)]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc


def load_ranks(out_dir, n):
    """The npz each rank wrote as <out_dir>/rank<r>.npz."""
    return [dict(np.load(Path(out_dir) / f"rank{r}.npz")) for r in range(n)]
