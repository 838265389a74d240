"""Thread defaults chosen before numpy loads (mstrain._threads)."""
import os
import subprocess
import sys

import pytest

PROBE = ("import os, mstrain; print(os.environ.get('OPENBLAS_NUM_THREADS'), os.environ.get('OMP_WAIT_POLICY'), "
         "os.environ.get('OPENBLAS_THREAD_TIMEOUT'), os.environ.get('GOMP_SPINCOUNT'), os.environ.get('KMP_BLOCKTIME'))")


def _probe(**env_overrides):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY",
                        "OPENBLAS_THREAD_TIMEOUT", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "PMI_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")}
    env.update(env_overrides)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_single_process_keeps_blas_threads_bounds_openmp_spinning_and_makes_openblas_workers_sleep():
    assert _probe() == ["None", "None", "4", "3000", "1"]


@pytest.mark.parametrize("ranks", [2, 4])
def test_mpi_ranks_split_the_cores(ranks):
    blas, *_ = _probe(PMI_SIZE=str(ranks), MPI_LOCALNRANKS=str(ranks))
    assert blas == str(max(1, (os.cpu_count() or 1) // ranks))


def test_user_settings_win():
    assert _probe(PMI_SIZE="2", OMP_NUM_THREADS="3", OMP_WAIT_POLICY="ACTIVE", OPENBLAS_THREAD_TIMEOUT="10",
                  GOMP_SPINCOUNT="7", KMP_BLOCKTIME="0") == ["None", "ACTIVE", "10", "7", "0"]


def test_a_users_wait_policy_is_left_alone_by_the_spin_defaults():
    assert _probe(OMP_WAIT_POLICY="PASSIVE") == ["None", "PASSIVE", "4", "None", "None"]


def _import_warnings(code, **env_overrides):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_NUM_THREADS")}
    env.update(env_overrides)
    out = subprocess.run([sys.executable, "-W", "always::RuntimeWarning", "-c", code], env=env,
                         capture_output=True, text=True, check=True)
    return out.stderr


def test_importing_numpy_first_warns_once_naming_the_settings_that_missed_openblas():
    err = _import_warnings("import numpy; import mstrain")
    assert err.count("imported after numpy") == 1 and "OPENBLAS_THREAD_TIMEOUT=4" in err


@pytest.mark.parametrize("code, env", [("import mstrain, numpy", {}),
                                       ("import numpy; import mstrain", {"OPENBLAS_THREAD_TIMEOUT": "4"})])
def test_no_warning_when_the_settings_reach_openblas(code, env):
    assert "imported after numpy" not in _import_warnings(code, **env)
