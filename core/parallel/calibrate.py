"""Measure this machine's constants for the cost model: `mstrain plan --calibrate`.

    mstrain plan --calibrate [--calibrate-ranks N] [--profile PATH]
    mpiexec -n N mstrain plan --calibrate            (links measured over the launched ranks)

What is measured (each rank with one numpy thread, as training ranks run):
- matrix products: FLOP/s of a forward product and its two backward products at sizes from
  64^3 to transformer-layer sizes (`Hardware.flops` the best, `matmul_curve` each size's
  fraction of it: small products run well below peak);
- memory bandwidth of a large elementwise add;
- per element, forward + backward, the suite's own layer norm, tanh-GELU, attention softmax with
  scale and causal mask, bias/residual add, softmax cross-entropy, and one Adam update;
- per primitive call, the eager dispatch overhead, as one tiny transformer layer of
  `mstrain.parallel.layers` sees it (its time / its number of primitive calls, forward + backward),
  and that number of calls per layer and for the embedding + head + loss;
- all-reduce latency and bandwidth over 1 and N ranks (ring formulas inverted; a plain process
  launches `mpiexec -n N` for it), how much slower a rank computes while N ranks compute at
  once (shared cores, memory bandwidth, other users of the machine) than alone, and how long a
  blocking collective waits for the ranks' drift when they arrive from computing.

The profile is JSON in `$MSTRAIN_CACHE_DIR` (default `~/.cache/mstrain`)/hardware.json;
`load_hardware()` reads it (built-in defaults when there is none) and `mstrain plan` uses it.
"""
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .cost_model import Hardware

PROFILE_NAME = "hardware.json"
_FORMAT = "mstrain-hardware-profile"


def cache_dir():
    """Where mstrain keeps machine-specific files: $MSTRAIN_CACHE_DIR or ~/.cache/mstrain."""
    return Path(os.environ.get("MSTRAIN_CACHE_DIR") or Path.home() / ".cache" / "mstrain")


def profile_path():
    return cache_dir() / PROFILE_NAME


# ---- reading ---------------------------------------------------------------------------------------

def read_profile(path=None):
    """The profile dict at `path` (default: the cache's), or None when there is none."""
    path = Path(path) if path is not None else profile_path()
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"hardware profile is unreadable ({exc}); run `mstrain plan --calibrate` again",
                          source=str(path)) from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or not isinstance(doc.get("hardware"), dict):
        raise ConfigError("not an mstrain hardware profile; run `mstrain plan --calibrate` again", source=str(path))
    return doc


def hardware_from_profile(doc, **overrides):
    """A Hardware from a profile dict (fields it lacks keep their defaults) and overrides."""
    known = {f.name for f in fields(Hardware)}
    values = {k: v for k, v in (doc or {}).get("hardware", {}).items() if k in known}
    if "matmul_curve" in values:
        values["matmul_curve"] = tuple(tuple(float(x) for x in point) for point in values["matmul_curve"])
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Hardware(**values)


_cached = {}


def load_hardware(path=None, **overrides):
    """The calibrated Hardware of this machine (built-in defaults when no profile exists)."""
    key = str(Path(path) if path is not None else profile_path())
    if key not in _cached:
        _cached[key] = read_profile(key)
    return hardware_from_profile(_cached[key], **overrides)


# ---- timing helpers --------------------------------------------------------------------------------

def _median_time(fn, repeat, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


_PRODUCT_SHAPES = ((64, 64, 64), (128, 128, 128), (256, 128, 256), (512, 128, 512), (1024, 128, 512),
                   (1024, 512, 128), (2048, 256, 1024))


def measure_matmul_curve():
    """[(flops of one product, FLOP/s)] over products a@b, g@b.T, a.T@g of each (m, k, n)."""
    rng = np.random.default_rng(0)
    curve = []
    for m, k, n in _PRODUCT_SHAPES:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        g = rng.standard_normal((m, n), dtype=np.float32)
        repeat = max(3, min(30, int(2e8 // (2 * m * k * n))))
        seconds = (_median_time(lambda: a @ b, repeat) + _median_time(lambda: g @ b.T, repeat)
                   + _median_time(lambda: a.T @ g, repeat)) / 3
        curve.append((2.0 * m * k * n, 2.0 * m * k * n / seconds))
    merged = {}
    for flops, rate in curve:  # shapes of equal work: one point at their mean rate
        merged.setdefault(flops, []).append(rate)
    return [(flops, sum(rates) / len(rates)) for flops, rates in sorted(merged.items())]


def measure_memory_bandwidth():
    """Bytes/s of an out-of-cache elementwise add (two reads, one write)."""
    x = np.ones(1 << 21, np.float32)
    y, out = x.copy(), np.empty_like(x)
    return 3 * x.nbytes / _median_time(lambda: np.add(x, y, out=out), 10)


def _forward_backward_time(fn, inputs, repeat=5):
    """Seconds of value_and_grad(fn) w.r.t. every input (the suite's autodiff)."""
    from ..autograd import value_and_grad
    from ..ops import functional as F
    grad_fn = value_and_grad(lambda *xs: F.sum(fn(*xs)), tuple(range(len(inputs))))
    return _median_time(lambda: grad_fn(*inputs), repeat)


def measure_elementwise_costs():
    """Seconds per element, forward + backward, of the elementwise work of a transformer layer."""
    from ..ops import functional as F
    from ..tensor import Tensor
    rng = np.random.default_rng(1)
    t = lambda *shape: Tensor(rng.standard_normal(shape, dtype=np.float32))  # noqa: E731
    x, wide, gamma, beta = t(1024, 256), t(1024, 512), t(256), t(256)
    scores = t(8, 4, 64, 64)
    future = Tensor(np.triu(np.ones((64, 64), dtype=bool), 1))

    def masked_softmax(s):
        return F.softmax(F.where(future, np.asarray(-1e9, np.float32), s * 0.125), -1)
    labels = rng.integers(0, 512, 1024)
    costs = {
        "norm_cost": _forward_backward_time(lambda a, g, b: F.layer_norm(a, g, b), (x, gamma, beta)) / x.size,
        "gelu_cost": _forward_backward_time(F.gelu, (wide,)) / wide.size,
        "attention_cost": _forward_backward_time(masked_softmax, (scores,)) / scores.size,
        "add_cost": _forward_backward_time(lambda a, b: a + b, (wide, t(512))) / wide.size,
        "xent_cost": _forward_backward_time(lambda z: F.softmax_cross_entropy(z, labels, sparse=True),
                                            (wide,)) / wide.size,
    }
    costs["optimizer_cost"] = _adam_cost()
    return costs


def _adam_cost():
    from ..nn.optim.adam import Adam
    from ..tensor import Parameter, Tensor
    param = Parameter(np.zeros((512, 512), np.float32), name="w")
    opt = Adam([param], 1e-3)
    grads = (Tensor(np.full((512, 512), 1e-3, np.float32)),)
    return _median_time(lambda: opt(grads), 10) / param.size


class _CountingTracer:
    """A dispatch tracer that counts primitive calls and runs them eagerly."""

    def __init__(self):
        self.calls = 0

    def apply(self, prim, inputs, attrs):
        from ..ops.primitive import _run, dispatch
        self.calls += 1
        dispatch.tracer = None
        try:
            return _run(prim, inputs, attrs)
        finally:
            dispatch.tracer = self


def _calls_and_time(step):
    from ..ops.primitive import dispatch
    counter = _CountingTracer()
    dispatch.tracer = counter
    try:
        step()
    finally:
        dispatch.tracer = None
    return counter.calls, _median_time(step, 20, warmup=3)


def measure_dispatch(groups):
    """(op_overhead, ops_per_layer, ops_fixed): a tiny layer of mstrain.parallel.layers (over
    `groups`, model_parallel 1), where compute is negligible, timed and counted forward + backward."""
    from .. import nn
    from ..autograd import value_and_grad
    from ..ops import functional as F
    from ..tensor import Tensor
    from .layers import ColumnParallelDense, ParallelAttention, ParallelMLP, VocabParallelCrossEntropy, \
        VocabParallelEmbedding
    ln1, ln2 = nn.LayerNorm((8,)), nn.LayerNorm((8,))
    attn, mlp = ParallelAttention(8, 2, groups), ParallelMLP(8, 32, groups)
    x = Tensor(np.ones((1, 4, 8), np.float32))

    def layer(h):
        h = h + attn(ln1(h))
        return F.sum(h + mlp(ln2(h)))
    layer_params = [p for c in (ln1, ln2, attn, mlp) for p in c.trainable_params()]
    layer_step = value_and_grad(layer, 0, layer_params)
    layer_calls, layer_time = _calls_and_time(lambda: layer_step(x))
    embed, head, loss = VocabParallelEmbedding(16, 8, groups), ColumnParallelDense(8, 16, groups), \
        VocabParallelCrossEntropy(groups)
    ids = np.zeros((1, 4), np.int64)
    fixed_params = [p for c in (embed, head) for p in c.trainable_params()]
    fixed_step = value_and_grad(lambda: loss(head(embed(Tensor(ids))), ids), None, fixed_params)
    fixed_calls, _ = _calls_and_time(fixed_step)
    return layer_time / layer_calls, layer_calls, fixed_calls


def _single_rank_groups():
    """ParallelGroups with model_parallel 1 (what the tiny layer needs) over the current world
    (collective)."""
    from .context import auto_parallel_context, parallel_groups, set_auto_parallel_context
    saved = auto_parallel_context()
    set_auto_parallel_context(parallel_mode="hybrid_parallel", model_parallel=1, pipeline_stages=1)
    try:
        return parallel_groups()
    finally:
        set_auto_parallel_context(parallel_mode=saved["parallel_mode"], model_parallel=saved["model_parallel"],
                                  pipeline_stages=saved["pipeline_stages"])


# ---- links -----------------------------------------------------------------------------------------

def measure_allreduce(group=None):
    """{ranks, small_s, large_s, latency, bandwidth} of all-reduce over `group` (default the world)."""
    from ..communication import all_reduce_array, barrier, get_group
    group = get_group(group)
    n = group.size
    small, large = np.ones(2, np.float32), np.ones(1 << 20, np.float32)

    def timed(array):
        def once():
            barrier(group)
            all_reduce_array(array, group)
        return _median_time(once, 10, warmup=3) - _median_time(lambda: barrier(group), 10, warmup=1)
    t_small, t_large = max(timed(small), 1e-7), max(timed(large), 1e-7)
    result = {"ranks": n, "small_s": t_small, "large_s": t_large}
    if n > 1:
        result["latency"] = t_small / (2 * (n - 1))
        result["bandwidth"] = 2 * (n - 1) / n * large.nbytes / max(t_large - t_small, 1e-9)
    return result


def _mpiexec():
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else shutil.which("mpiexec")


def probe_time():
    """Seconds of a fixed piece of layer work (a forward + backward product and a GELU): the
    yardstick for how much slower each rank computes when several run at once."""
    from ..ops import functional as F
    from ..tensor import Tensor
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((1024, 128), dtype=np.float32), rng.standard_normal((128, 512), dtype=np.float32)
    g, wide = rng.standard_normal((1024, 512), dtype=np.float32), Tensor(rng.standard_normal((1024, 512),
                                                                                               dtype=np.float32))

    def work():
        a @ b, g @ b.T, a.T @ g
        _forward_backward_time(F.gelu, (wide,), repeat=1)
    return _median_time(work, 9)


def _idle_barrier():
    """A barrier the waiting ranks sleep through (MPI's blocking barrier spins a core, which
    would slow the rank being measured)."""
    from .. import communication as comm
    request = comm.get_group("world").require_member().Ibarrier()
    while not request.Test():
        time.sleep(0.002)


def _measure_world(rounds=5):
    """{ranks, all-reduce costs, probe_s, probe_alone_s, slowdown, sync} over the world. In each round
    rank 0 computes the probe alone (the others idle, sleeping, not spinning in MPI) and then
    every rank computes it at once; the slowdown is the ratio of the medians, so both sides see
    the same load from the rest of the machine."""
    from .. import communication as comm
    comm.init()
    alone, together = [], []
    for _ in range(rounds):
        if comm.get_rank() == 0:
            alone.append(probe_time())
        _idle_barrier()
        together += comm.all_gather_object(probe_time())
    alone = statistics.median(comm.broadcast_object(alone))
    shared = statistics.median(together)
    return {**measure_allreduce(), "probe_s": shared, "probe_alone_s": alone, "slowdown": shared / alone,
            "sync": measure_sync()}


def measure_sync(iterations=30):
    """Mean extra seconds a blocking all-reduce takes when the ranks arrive from computing (as in
    training) rather than from a barrier: the ranks' drift (scheduling, a busy neighbour), which
    every blocking collective between compute phases pays. Mean over ranks and calls."""
    from ..communication import all_gather_object, all_reduce_array, barrier
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((512, 256), dtype=np.float32), rng.standard_normal((256, 256), dtype=np.float32)
    buf = np.ones(1 << 17, np.float32)
    after_compute, after_barrier = [], []
    for i in range(iterations):
        for _ in range(4):
            a @ b
        start = time.perf_counter()
        all_reduce_array(buf)
        if i >= 3:
            after_compute.append(time.perf_counter() - start)
    for _ in range(iterations // 2):
        barrier()
        start = time.perf_counter()
        all_reduce_array(buf)
        after_barrier.append(time.perf_counter() - start)
    drift = statistics.mean(after_compute) - statistics.mean(after_barrier)
    return max(0.0, statistics.mean(all_gather_object(drift)))


def measure_links(ranks):
    """All-reduce costs and the compute slowdown over 1 rank and over `ranks` ranks:
    {"1": {...}, "<ranks>": {...}}. In a world of more than one rank the world is measured; a
    plain process launches `mpiexec -n ranks python -m mstrain.parallel.calibrate --links`."""
    from .. import communication as comm
    comm.init()
    if comm.get_group_size() > 1:
        return {str(comm.get_group_size()): _measure_world()}
    links = {"1": measure_allreduce()}
    launcher = _mpiexec()
    if ranks > 1 and launcher is not None:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [launcher, "-n", str(ranks), sys.executable, "-m", "mstrain.parallel.calibrate", "--links"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        if proc.returncode == 0 and proc.stdout.strip():
            links[str(ranks)] = json.loads(proc.stdout.strip().splitlines()[-1])
    return links


# ---- the profile -----------------------------------------------------------------------------------

def measure_compute(groups):
    """The per-rank compute constants of one rank running alone."""
    curve = measure_matmul_curve()
    peak = max(rate for _, rate in curve)
    op_overhead, ops_per_layer, ops_fixed = measure_dispatch(groups)
    return {"flops": peak, "matmul_curve": [[flops, rate / peak] for flops, rate in curve],
            "memory_bandwidth": measure_memory_bandwidth(), "op_overhead": op_overhead,
            "ops_per_layer": ops_per_layer, "ops_fixed": ops_fixed, **measure_elementwise_costs()}


def calibrate(ranks=2):
    """Measure everything; returns the profile dict (not yet written). Under mpiexec, rank 0
    measures the compute constants while the other ranks sleep (the slowdown of ranks computing
    at once is measured separately), then all measure the links."""
    from .. import communication as comm
    comm.init()
    groups = _single_rank_groups()
    if comm.get_group_size() > 1:
        hw = measure_compute(groups) if comm.get_rank() == 0 else None
        _idle_barrier()
        hw = comm.broadcast_object(hw)
    else:
        hw = measure_compute(groups)
    links = measure_links(ranks)
    multi = [v for k, v in links.items() if int(k) > 1 and v]
    if multi:
        hw["latency"], hw["bandwidth"] = multi[0]["latency"], multi[0]["bandwidth"]
        hw["shared_slowdown"] = max(1.0, multi[0]["slowdown"])
        hw["collective_sync"] = multi[0]["sync"]
    return {"format": _FORMAT, "version": 1,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "numpy_threads": os.environ.get("OMP_NUM_THREADS", "default"),
            "hardware": hw, "links": links,
            "note": "per-rank constants; links, slowdown and sync measured over the ranks listed in links"}


def write_profile(profile, path=None):
    """Write the profile atomically; returns its path."""
    from ..fileio import write_json_atomically
    path = Path(path) if path is not None else profile_path()
    write_json_atomically(path, profile)
    _cached.pop(str(path), None)
    return path


def describe(hw):
    """One line per measured constant, for `mstrain plan --calibrate`."""
    d = asdict(hw)
    curve = ", ".join(f"{f:.2g} flop: {hw.flops * r / 1e9:.0f}" for f, r in hw.matmul_curve) or "none"
    return "\n".join([
        f"  matrix products   {d['flops'] / 1e9:.1f} GFLOP/s peak; by product size (GFLOP/s): {curve}",
        f"  memory bandwidth  {d['memory_bandwidth'] / 1e9:.1f} GB/s",
        f"  dispatch          {d['op_overhead'] * 1e6:.1f} us per primitive call (fwd + bwd); "
        f"{d['ops_per_layer']} calls per transformer layer, {d['ops_fixed']} for embedding + head + loss",
        "  per element (ns)  " + ", ".join(f"{k.replace('_cost', '')} {d[k] * 1e9:.2f}" for k in
                                          ("norm_cost", "gelu_cost", "attention_cost", "add_cost", "xent_cost",
                                           "optimizer_cost")),
        f"  all-reduce        latency {d['latency'] * 1e6:.1f} us per ring step, bandwidth {d['bandwidth'] / 1e9:.2f} GB/s",
        f"  ranks at once     compute {d['shared_slowdown']:.2f}x slower per rank than one rank alone; "
        f"{d['collective_sync'] * 1e6:.0f} us of drift waited for at each blocking collective",
    ])


def _links_main():
    from .. import communication as comm
    comm.init()
    result = _measure_world()
    if comm.get_rank() == 0:
        print(json.dumps(result), flush=True)


if __name__ == "__main__" and "--links" in sys.argv:
    _links_main()
