"""The strategy search's predicted step time vs the measured one, on the layouts that fit this
machine (1 and 2 ranks): data parallel, tensor (model) parallel and 1F1B pipeline.

    PYTHONPATH=. python benchmarks/strategy_search.py [--steps 8]

The workload: a GPT of the suite's tensor-parallel layers (VocabParallelEmbedding, ParallelAttention,
ParallelMLP, a column-parallel LM head, VocabParallelCrossEntropy), 4 layers, hidden 128, 4 heads,
vocab 256, sequence 64, global batch 16, Adam; one thread per rank. The cost model is calibrated
here first (numpy matmul FLOP/s, tanh bytes/s, the forward + backward time of one tiny op, and the all-reduce
latency and bandwidth of 2 ranks), then `core.parallel.search.evaluate` predicts each layout's
step time. One JSON line per layout (predicted, measured, ratio), then which layout the search
picks for 2 ranks and which one was measured fastest.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WARMUP = 3
LAYERS, HIDDEN, HEADS, VOCAB, SEQ, BATCH = 4, 128, 4, 256, 64, 16
LAYOUTS = [(1, 1, 1, 1), (2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 2), (1, 1, 2, 4)]  # dp, mp, pp, micro


def _build(groups):
    import numpy as np
    from core import nn
    from core.ops import functional as F
    from core.parallel.layers import (ColumnParallelDense, ParallelAttention, ParallelMLP,
                                      VocabParallelEmbedding)
    from core.tensor import Parameter

    class Embed(nn.Cell):
        def __init__(self):
            super().__init__()
            self.tokens = VocabParallelEmbedding(VOCAB, HIDDEN, groups)
            self.positions = Parameter(np.random.default_rng(0).normal(0, 0.02, (SEQ, HIDDEN)).astype(np.float32))

        def construct(self, ids):
            return self.tokens(ids) + self.positions

    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm((HIDDEN,)), nn.LayerNorm((HIDDEN,))
            self.attn = ParallelAttention(HIDDEN, HEADS, groups)
            self.mlp = ParallelMLP(HIDDEN, 4 * HIDDEN, groups)

        def construct(self, h):
            h = h + self.attn(self.ln1(h))
            return h + self.mlp(self.ln2(h))

    class Head(nn.Cell):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm((HIDDEN,))
            self.proj = ColumnParallelDense(HIDDEN, VOCAB, groups, has_bias=False)

        def construct(self, h):
            return self.proj(self.ln(h))

    del F
    return [Embed()] + [Block() for _ in range(LAYERS)] + [Head()]


def _worker(dp, mp, pp, micro, steps):
    sys.path.insert(0, str(REPO))
    import numpy as np
    import core as ms
    from core import communication as comm, nn
    from core.parallel import DistributedGradReducer, parallel_groups, set_auto_parallel_context
    from core.parallel.layers import VocabParallelCrossEntropy
    from core.parallel.pipeline import PipelineCell, PipelineTrainOneStepCell

    comm.init()
    set_auto_parallel_context(parallel_mode="hybrid_parallel", model_parallel=mp, pipeline_stages=pp)
    groups = parallel_groups()
    ms.set_seed(0)
    cells = _build(groups)
    loss_fn = VocabParallelCrossEntropy(groups)
    per_stage = (LAYERS + 2) // pp
    for i, cell in enumerate(cells):
        cell.pipeline_stage = min(i // per_stage, pp - 1)
    if pp > 1:
        pipe = PipelineCell(nn.SequentialCell(cells), loss_fn, micro, groups)
        step = PipelineTrainOneStepCell(pipe, nn.Adam(pipe.trainable_params(), 1e-3))
    else:
        net = nn.SequentialCell(cells)
        params = net.trainable_params()
        grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, params)
        reducer, opt = DistributedGradReducer(params, group=groups.data), nn.Adam(params, 1e-3)

        def step(x, y):
            loss, grads = grad_fn(ms.Tensor(x), ms.Tensor(y))
            opt(reducer(grads))
            return loss
    rng = np.random.default_rng(1)
    local = BATCH // dp
    times = []
    for i in range(WARMUP + steps):
        tokens = rng.integers(0, VOCAB, (BATCH, SEQ + 1))[groups.dp_rank * local:(groups.dp_rank + 1) * local]
        comm.barrier()
        start = time.perf_counter()
        step(tokens[:, :-1], tokens[:, 1:])
        times.append(time.perf_counter() - start)
    measured = comm.all_reduce_array(np.array([statistics.median(times[WARMUP:])]), op="max")[0]
    link = _link_costs(comm) if comm.get_group_size() > 1 else None
    if comm.get_rank() == 0:
        print(json.dumps({"measured_s": float(measured), "link": link}), flush=True)


def _link_costs(comm):
    """All-reduce latency (8 bytes) and bandwidth (4 MiB) of this world, ring formulas inverted."""
    import numpy as np
    n = comm.get_group_size()
    results = []
    for size in (2, 1 << 20):
        a = np.ones(size, np.float32)
        for _ in range(3):
            comm.all_reduce_array(a)
        ts = []
        for _ in range(10):
            comm.barrier()
            t = time.perf_counter()
            comm.all_reduce_array(a)
            ts.append(time.perf_counter() - t)
        results.append(statistics.median(ts))
    latency = results[0] / (2 * (n - 1))
    bandwidth = 2 * (n - 1) / n * (4 << 20) / max(results[1] - results[0], 1e-9)
    return {"latency": latency, "bandwidth": bandwidth}


def _calibrate_compute():
    sys.path.insert(0, str(REPO))
    import numpy as np
    import core as ms
    from core.ops import functional as F
    a = np.random.default_rng(0).standard_normal((1024, HIDDEN)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((HIDDEN, 4 * HIDDEN)).astype(np.float32)
    g = np.random.default_rng(3).standard_normal((1024, 4 * HIDDEN)).astype(np.float32)
    # a forward product and the two of its backward (with their transposed operands)
    matmul = (_best_of(lambda: a @ b) + _best_of(lambda: g @ b.T) + _best_of(lambda: a.T @ g)) / 3
    big = np.random.default_rng(2).standard_normal(1 << 21).astype(np.float32)  # 8 MiB: out of cache
    elementwise = _best_of(lambda: np.tanh(big))
    tiny = ms.Tensor(np.ones((2, 2), np.float32))

    def chain(x):
        for _ in range(50):
            x = x * 1.0001
        return F.sum(x)
    grad_chain = ms.value_and_grad(chain, 0)
    op = _best_of(lambda: grad_chain(tiny), repeat=20) / 50  # forward + backward of one op
    return {"flops": 2 * 1024 * HIDDEN * 4 * HIDDEN / matmul, "memory_bandwidth": 2 * big.nbytes / elementwise,
            "op_overhead": op}


def _best_of(fn, repeat=20):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _launch(layout, steps):
    dp, mp, pp, micro = layout
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(dp * mp * pp), sys.executable, __file__,
           "--worker", *map(str, layout), "--steps", str(steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--worker", nargs=4, type=int, metavar=("DP", "MP", "PP", "MICRO"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(*args.worker, args.steps)
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from core.parallel.cost_model import Hardware, TransformerSpec
    from core.parallel.search import Candidate, evaluate, search
    from core.parallel.cost_model import layer_plan
    measured = {layout: _launch(layout, args.steps) for layout in LAYOUTS}
    link = next(m["link"] for m in measured.values() if m["link"])
    hw = Hardware(**_calibrate_compute(), **link)
    spec = TransformerSpec(LAYERS, HIDDEN, HEADS, VOCAB, SEQ, BATCH)
    for layout, result in measured.items():
        dp, mp, pp, micro = layout
        cand = evaluate(hw, spec, Candidate(dp, mp, pp, micro, False, False), lambda m, b: layer_plan(hw, spec, m, b))
        print(json.dumps({"workload": "strategy-search", "name": "gpt-4x128", "impl": "mstrain",
                          "layout": {"data_parallel": dp, "model_parallel": mp, "pipeline_stages": pp,
                                     "micro_batch_num": micro},
                          "predicted_s": round(cand.step_time, 5), "measured_s": round(result["measured_s"], 5),
                          "predicted_over_measured": round(cand.step_time / result["measured_s"], 3)}))
    best, _, seconds = search(spec, 2, hw)
    two_rank = {k: v["measured_s"] for k, v in measured.items() if k[0] * k[1] * k[2] == 2}
    fastest = min(two_rank, key=two_rank.get)
    print(json.dumps({"workload": "strategy-search", "name": "summary", "impl": "mstrain",
                      "hardware": {k: float(f"{v:.4g}") for k, v in vars(hw).items()},
                      "search_choice_2_ranks": best.layout(), "search_seconds": round(seconds, 4),
                      "measured_fastest_2_ranks": dict(zip(("data_parallel", "model_parallel", "pipeline_stages",
                                                            "micro_batch_num"), fastest))}))


if __name__ == "__main__":
    main()
