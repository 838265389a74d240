"""Plumbing shared by the benchmark scripts: timing, the JSON result line, and running a peer.

A script measures, then `emit(record(...))` prints one JSON line per mode in the shape of
BENCHMARKS.md. With `--peer`, `run_peer(script, args)` runs ../shared/peers/<script> in the peer
interpreter (MSTRAIN_PEER_PYTHON, or a venv beside the peers) and returns its JSON lines;
`ratio(ours, peer)` is the side-by-side line. A script run with `--peer` checks the peer set-up
when it imports this module, so a missing interpreter or peer directory fails before our own run.
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PEERS = Path(os.environ.get("MSTRAIN_PEERS_DIR", REPO.parent / "shared" / "peers"))  # the peer scripts
WARMUP = 5


def median_seconds(call, repeats, warmup=WARMUP, clock=time.perf_counter):
    """Median time of `call()` over `repeats` runs after `warmup` untimed ones: wall time, or with
    `clock=time.thread_time` the calling thread's own CPU time (a one-thread measure)."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = clock()
        call()
        times.append(clock() - start)
    return statistics.median(times)


def record(workload, name, mode, speed_metric, speed, quality_metric, quality, **extra):
    """One result in the shape of BENCHMARKS.md (impl is always 'mstrain')."""
    line = {"workload": workload, "name": name, "impl": "mstrain", "mode": mode,
            "speed_metric": speed_metric, "speed": round(float(speed), 6),
            "quality_metric": quality_metric, "quality": None if quality is None else round(float(quality), 8),
            "python": platform.python_version(), "threads": os.cpu_count()}
    line.update(extra)
    return line


def emit(line):
    print(json.dumps(line), flush=True)


def peer_python():
    """The interpreter the peers run in, or None when none is installed."""
    candidates = [os.environ.get("MSTRAIN_PEER_PYTHON")]
    candidates += sorted(str(p) for p in PEERS.glob(".venv*/bin/python"))
    for path in candidates:
        if path and Path(path).exists():
            return path
    return None


def run_peer(script, args=()):
    """Run ../shared/peers/<script> (or a script given by absolute path, e.g. benchmarks/peers/...)
    and return the JSON lines it prints (dicts)."""
    python = peer_python()
    if python is None:
        raise RuntimeError(_NO_INTERPRETER)
    path = Path(script) if Path(script).is_absolute() else PEERS / script
    if not path.exists():
        raise RuntimeError(f"peer script {path} not found ({_WHERE_PEERS})")
    from mstrain import _threads  # the peer gets the environment without mstrain's thread defaults
    env = {k: v for k, v in os.environ.items() if _threads.set_by_core.get(k) != v}
    result = subprocess.run([python, str(path), *args], cwd=path.parent, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"peer {script} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    lines = [json.loads(x) for x in result.stdout.splitlines() if x.startswith("{")]
    for line in lines:
        print(json.dumps(line), flush=True)
    return lines


_NO_INTERPRETER = ("no peer interpreter: set MSTRAIN_PEER_PYTHON to a Python with the peers' packages "
                   "(../shared/peers/README.md), or create a .venv in the peers' directory")
_WHERE_PEERS = "the peers are looked for in ../shared/peers beside the checkout; set MSTRAIN_PEERS_DIR to their directory"


def check_peer_setup():
    """Exit 2 with the reason when `--peer` cannot run: no interpreter, or no peer directory."""
    if peer_python() is None:
        fail(_NO_INTERPRETER)
    if not PEERS.is_dir():
        fail(f"no peer directory {PEERS} ({_WHERE_PEERS})")


def ratio(ours, peer, **extra):
    """The side-by-side line: suite speed / peer speed (for times, below 1 is faster)."""
    line = {"workload": ours["workload"], "name": ours["name"], "ratio_of": f"{ours['mode']} / peer {peer.get('mode')}",
            "speed_metric": ours["speed_metric"], "mstrain": ours["speed"], "peer": peer["speed"],
            "speed_ratio": round(ours["speed"] / peer["speed"], 4)}
    line.update(extra)
    return line


def parse_seeds(text):
    """[int] of `--seeds` text such as '0,1,2' (exits 2 naming the option otherwise)."""
    try:
        return [int(seed) for seed in text.split(",")]
    except ValueError:
        fail(f"--seeds {text!r}: expected comma-separated integers such as 0,1,2")


def seed_summary(workload, name, mode, runs, quality, seeds):
    """One line over seeds from [(our line, the peer's line or None)]: mean speed (and mean of the per-seed
    ratios), each side's `quality` values ('val_loss', 'test_acc'...), their means, spreads and the
    difference of the means. One run's quality is chaotic in roundoff, so goals are judged on these."""
    ours = [o["quality"] for o, _ in runs]
    line = record(workload, name, f"{mode}_seeds", runs[0][0]["speed_metric"],
                  statistics.fmean(o["speed"] for o, _ in runs), f"mean_{runs[0][0]['quality_metric']}",
                  statistics.fmean(ours), seeds=seeds)
    line.update({f"{quality}_mstrain": [round(v, 4) for v in ours],
                 f"{quality}_std_mstrain": round(statistics.pstdev(ours), 4)})
    if runs[0][1] is not None:
        peers = [p["quality"] for _, p in runs]
        ratios = [o["speed"] / p["speed"] for o, p in runs]
        line.update({"mean_speed_ratio": round(statistics.fmean(ratios), 4),
                     f"{quality}_peer": [round(v, 4) for v in peers],
                     f"{quality}_std_peer": round(statistics.pstdev(peers), 4),
                     f"mean_{quality}_diff": round(statistics.fmean(ours) - statistics.fmean(peers), 4)})
    return line


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def blas_threads():
    """The threads numpy's OpenBLAS runs a product on in this process (1 when numpy's BLAS is another
    library): what our side of a benchmark ran with, printed beside its figures."""
    from mstrain.graph.native_blas import numpy_blas_threads
    return numpy_blas_threads()[1]()


if "--peer" in sys.argv[1:]:
    check_peer_setup()
