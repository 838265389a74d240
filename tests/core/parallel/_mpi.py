"""Run a script of `scripts/` under `mpiexec -n N` with a time limit (60 s; the scripts take a few
seconds even oversubscribed on 2 cores), so a hang fails the test instead of blocking CI."""
import os
import signal
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


def _run(cmd, timeout):
    """Run `cmd` in its own session; on timeout kill the whole session (mpiexec and every rank)
    and fail with what it printed, so a hang never outlives its test."""
    with subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            out, err = child.communicate()
            raise AssertionError(f"{' '.join(cmd)} hung: killed after {timeout} s\nstdout:\n{out[-3000:]}\n"
                                 f"stderr:\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(cmd, child.returncode, out, err)


def run_mpi(script, n, *args, timeout=60, check=True):
    """`mpiexec -n n python scripts/<script> args...`; returns the CompletedProcess."""
    cmd = [str(MPIEXEC), "-n", str(n), sys.executable, str(SCRIPTS / script), *map(str, args)]
    proc = _run(cmd, timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {proc.returncode}\n"
                             f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    return proc


def run_single(script, *args, timeout=60):
    """The same script as one plain process (no mpiexec)."""
    cmd = [sys.executable, str(SCRIPTS / script), *map(str, args)]
    proc = _run(cmd, timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc


def load_ranks(out_dir, n):
    """The npz each rank wrote as <out_dir>/rank<r>.npz."""
    return [dict(np.load(Path(out_dir) / f"rank{r}.npz")) for r in range(n)]
