"""The strategy search's predicted step time vs the measured one, on the layouts that fit this
machine (1 and 2 ranks): data parallel, tensor (model) parallel and 1F1B pipeline.

    PYTHONPATH=. python benchmarks/strategy_search.py [--steps 8] [--profile PATH]

The workload: a GPT of the suite's tensor-parallel layers (VocabParallelEmbedding, ParallelAttention,
ParallelMLP, a column-parallel LM head, VocabParallelCrossEntropy), 4 layers, hidden 128, 4 heads,
vocab 256, sequence 64, global batch 16, Adam; one thread per rank. The cost model's constants
come from `mstrain.parallel.calibrate` (what `mstrain plan --calibrate` runs), measured here first
(or read from --profile); then `mstrain.parallel.search.evaluate` predicts each layout's step time.
Every layout runs --rounds times, interleaved, and its fastest round counts (the machine is
shared: a busy neighbour slows the 2-rank layouts most). One JSON line per layout (predicted,
measured, ratio, predicted breakdown), then which layout the search picks for 2 ranks and which
one was measured fastest, with the machine's load average.
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
    from mstrain import nn
    from mstrain.ops import functional as F
    from mstrain.parallel.layers import (ColumnParallelDense, ParallelAttention, ParallelMLP,
                                      VocabParallelEmbedding)
    from mstrain.tensor import Parameter

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
    import mstrain as ms
    from mstrain import communication as comm, nn
    from mstrain.parallel import DistributedGradReducer, parallel_groups, set_auto_parallel_context
    from mstrain.parallel.layers import VocabParallelCrossEntropy
    from mstrain.parallel.pipeline import PipelineCell, PipelineTrainOneStepCell

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
    if comm.get_rank() == 0:
        print(json.dumps({"measured_s": float(measured)}), flush=True)


def _launch(layout, steps):
    dp, mp, pp, micro = layout
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(dp * mp * pp), sys.executable, __file__,
           "--worker", *map(str, layout), "--steps", str(steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _hardware(profile_path):
    from mstrain.parallel import calibrate
    if profile_path:
        profile = calibrate.read_profile(profile_path)
        if profile is None:
            raise SystemExit(f"no hardware profile at {profile_path}")
    else:
        profile = calibrate.calibrate(ranks=2)
    return calibrate.hardware_from_profile(profile)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--profile", default=None, help="use this hardware profile instead of calibrating now")
    parser.add_argument("--rounds", type=int, default=2, help="runs of every layout (the fastest is kept)")
    parser.add_argument("--worker", nargs=4, type=int, metavar=("DP", "MP", "PP", "MICRO"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(*args.worker, args.steps)
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from mstrain.parallel.cost_model import TransformerSpec, layer_plan
    from mstrain.parallel.search import Candidate, evaluate, search
    load_before = os.getloadavg()[0]
    hw = _hardware(args.profile)
    measured = {}
    for _ in range(args.rounds):  # layouts interleaved, the fastest round kept: a busy neighbour hits all alike
        for layout in LAYOUTS:
            result = _launch(layout, args.steps)
            if layout not in measured or result["measured_s"] < measured[layout]["measured_s"]:
                measured[layout] = result
    spec = TransformerSpec(LAYERS, HIDDEN, HEADS, VOCAB, SEQ, BATCH)
    for layout, result in measured.items():
        dp, mp, pp, micro = layout
        cand = evaluate(hw, spec, Candidate(dp, mp, pp, micro, False, False), lambda m, b: layer_plan(hw, spec, m, b))
        print(json.dumps({"workload": "strategy-search", "name": "gpt-4x128", "impl": "mstrain",
                          "layout": {"data_parallel": dp, "model_parallel": mp, "pipeline_stages": pp,
                                     "micro_batch_num": micro},
                          "predicted_s": round(cand.step_time, 5), "measured_s": round(result["measured_s"], 5),
                          "predicted_over_measured": round(cand.step_time / result["measured_s"], 3),
                          "predicted_breakdown_s": {k: round(v, 5) for k, v in cand.breakdown.items()}}))
    best, _, seconds = search(spec, 2, hw)
    two_rank = {k: v["measured_s"] for k, v in measured.items() if k[0] * k[1] * k[2] == 2}
    fastest = min(two_rank, key=two_rank.get)
    shown = {k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in vars(hw).items()
             if k not in ("matmul_curve", "memory")}
    print(json.dumps({"workload": "strategy-search", "name": "summary", "impl": "mstrain", "hardware": shown,
                      "search_choice_2_ranks": best.layout(), "search_seconds": round(seconds, 4),
                      "measured_fastest_2_ranks": dict(zip(("data_parallel", "model_parallel", "pipeline_stages",
                                                            "micro_batch_num"), fastest)),
                      "load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)]}))


if __name__ == "__main__":
    main()
