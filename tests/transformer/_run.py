"""Run the gpt_char job as a user would (`[mpiexec -n N] mstrain --config gpt_char ...`) with a hard
time limit: a hang kills the whole process group and fails the test."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TINY = ["model.num_layers=2", "model.hidden_size=32", "model.num_heads=4", "model.seq_length=16",
        "train.batch_size=4", "train.steps=6", "train.sink_size=2", "train.eval_every=0", "train.eval_windows=4",
        "train.dataset_sink_mode=false"]


def run_job(out_dir, *overrides, ranks=1, timeout=120, check=True):
    """gpt_char at a tiny size (TINY) with `overrides`."""
    return run_cli("gpt_char", out_dir, *TINY, *overrides, ranks=ranks, timeout=timeout, check=check)


def run_cli(config, out_dir, *overrides, ranks=1, timeout=120, check=True):
    cmd = [str(BIN / "mstrain"), "--config", config, f"train.output_dir={out_dir}", *overrides]
    if ranks > 1:
        cmd = [str(BIN / "mpiexec"), "-n", str(ranks)] + cmd
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PMI_RANK", None)
    env.pop("PMI_SIZE", None)
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            out, err = child.communicate()
            raise AssertionError(f"{' '.join(cmd)} hung: killed after {timeout} s\n{out[-2000:]}\n{err[-2000:]}")
    if check and child.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {child.returncode}\n{out[-2000:]}\n{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, child.returncode, out, err)


def step_losses(out_dir):
    return json.loads((Path(out_dir) / "history.json").read_text())["step_loss"]
