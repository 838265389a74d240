"""The auto-parallel strategy search (`search_mode: dynamic_programming`) and `mstrain plan`.

Every data x model x pipeline factorisation of the ranks that the model's sizes allow is tried
with each micro-batch count, recompute on/off and optimizer sharding on/off; per layer the
operator strategies come from `cost_model.layer_plan` (dynamic programming over the chain).
A candidate's step time is

    (micro_batch_num + pp - 1) * (stage time of one micro-batch + its point-to-point sends)
    + data-parallel gradient all-reduce + optimizer update (and gradient accumulation)

where the stage time covers its layers and the embedding / LM head / loss (1F1B: the bubble
is the pp - 1 extra stage times); the breakdown also shows the dispatch overhead inside it.

and its memory per rank is parameters, gradients and optimizer state of its stage's share
(the state divided by dp when sharded) plus the activations of the micro-batches in flight
(one layer input each with recompute). The fastest candidate within the memory limit wins.
"""
import time
from dataclasses import dataclass, field

from ..errors import ParallelConfigError
from .cost_model import head_time, layer_plan, optimizer_time

_OPTIMIZER_STATES = 2  # Adam: two moments


@dataclass
class Candidate:
    dp: int
    mp: int
    pp: int
    micro_batch_num: int
    recompute: bool
    optimizer_shard: bool
    step_time: float = 0.0
    memory: float = 0.0
    breakdown: dict = field(default_factory=dict)
    memory_breakdown: dict = field(default_factory=dict)
    strategies: dict = field(default_factory=dict)

    def layout(self):
        return {"data_parallel": self.dp, "model_parallel": self.mp, "pipeline_stages": self.pp,
                "micro_batch_num": self.micro_batch_num, "recompute": self.recompute,
                "enable_parallel_optimizer": self.optimizer_shard}


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _fits_model(spec, mp, pp):
    return (spec.num_heads % mp == 0 and spec.hidden_size % mp == 0 and spec.ffn % mp == 0
            and spec.vocab_size % mp == 0 and spec.num_layers % pp == 0)


def evaluate(hw, spec, cand, plans):
    """Fill in the candidate's predicted step time and memory per rank."""
    vb = spec.bytes_per_value
    micro = spec.batch_size // cand.dp // cand.micro_batch_num
    plan = plans(cand.mp, micro)
    layers = spec.num_layers // cand.pp
    tokens = micro * spec.seq_length
    forward_share = 1.0 / 3.0
    slow = hw.shared_slowdown if cand.dp * cand.mp * cand.pp > 1 else 1.0  # ranks sharing the machine
    compute = (plan.time - plan.comm_time) * slow
    layer_time = compute * (1 + forward_share if cand.recompute else 1) + plan.comm_time
    stage = layers * layer_time + head_time(hw, spec, tokens, cand.mp, slow)
    boundary = tokens * spec.hidden_size * vb / (cand.mp if plan.boundary == "T" else 1)
    p2p = 2 * hw.send(boundary) if cand.pp > 1 else 0.0
    pipeline = (cand.micro_batch_num + cand.pp - 1) * (stage + p2p)
    params = layers * spec.layer_params() * plan.weight_fraction + spec.vocab_size * spec.hidden_size / cand.mp
    grad_bytes = params * vb
    dp_comm = hw.all_reduce(grad_bytes, cand.dp)
    accumulate = (cand.micro_batch_num - 1) * params * hw.add_cost / 2  # summing micro-batch gradients
    update = (optimizer_time(hw, spec, params / (cand.dp if cand.optimizer_shard else 1), layers) + accumulate) * slow
    cand.step_time = pipeline + dp_comm + update
    m = cand.micro_batch_num
    cand.breakdown = {"compute_and_model_parallel": m * stage,
                      "dispatch_overhead": m * slow * (layers * plan.dispatch_time * (1 + forward_share * cand.recompute)
                                                       + hw.ops_fixed * hw.op_overhead),
                      "model_parallel_comm": m * layers * plan.comm_time,
                      "pipeline_bubble": (cand.pp - 1) * (stage + p2p), "pipeline_p2p": m * p2p,
                      "data_parallel_comm": dp_comm, "optimizer": update}
    state = params * vb * _OPTIMIZER_STATES / (cand.dp if cand.optimizer_shard else 1)
    in_flight = min(cand.pp, cand.micro_batch_num)
    per_layer = plan.activation_bytes
    if cand.recompute:
        acts = in_flight * layers * boundary + per_layer
    else:
        acts = in_flight * layers * per_layer
    logits = 2 * tokens * spec.vocab_size * vb / cand.mp
    cand.memory_breakdown = {"parameters": params * vb, "gradients": grad_bytes, "optimizer_state": state,
                             "activations": acts + logits}
    cand.memory = sum(cand.memory_breakdown.values())
    cand.strategies = plan.strategies
    return cand


def candidates(spec, n, max_model_parallel=None, max_pipeline_stages=None):
    """Every layout of n ranks the model's sizes allow, within the degrees a job supports."""
    for mp in _divisors(n):
        if max_model_parallel is not None and mp > max_model_parallel:
            continue
        for pp in _divisors(n // mp):
            if max_pipeline_stages is not None and pp > max_pipeline_stages:
                continue
            dp = n // (mp * pp)
            if not _fits_model(spec, mp, pp) or spec.batch_size % dp:
                continue
            local = spec.batch_size // dp
            micros = [k for k in _divisors(local) if k >= pp] if pp > 1 else [1]
            for micro in micros:
                for recompute in (False, True):
                    for shard in ((False, True) if dp > 1 else (False,)):
                        yield Candidate(dp, mp, pp, micro, recompute, shard)


def search(spec, n, hw=None, memory_limit=None, max_model_parallel=None, max_pipeline_stages=None):
    """(best Candidate, all evaluated candidates, seconds spent). `max_model_parallel` /
    `max_pipeline_stages` keep the search to the layouts a job can run (1: that split is off).
    Raises ParallelConfigError when no layout fits the ranks or the memory limit."""
    if hw is None:
        from .calibrate import load_hardware
        hw = load_hardware()
    limit = memory_limit if memory_limit is not None else hw.memory
    start = time.perf_counter()
    cache = {}

    def plans(mp, micro):
        if (mp, micro) not in cache:
            cache[(mp, micro)] = layer_plan(hw, spec, mp, micro)
        return cache[(mp, micro)]
    evaluated = [evaluate(hw, spec, c, plans)
                 for c in candidates(spec, n, max_model_parallel, max_pipeline_stages)]
    if not evaluated:
        limits = "".join(f", {name} at most {value}" for name, value in
                         (("model_parallel", max_model_parallel), ("pipeline_stages", max_pipeline_stages))
                         if value is not None)
        raise ParallelConfigError(f"no data x model x pipeline layout of {n} ranks fits the model{limits}: num_heads="
                                  f"{spec.num_heads}, hidden_size={spec.hidden_size}, vocab_size={spec.vocab_size} "
                                  f"must divide by model_parallel, num_layers={spec.num_layers} by pipeline_stages "
                                  f"and batch_size={spec.batch_size} by data_parallel")
    fitting = [c for c in evaluated if c.memory <= limit]
    if not fitting:
        smallest = min(evaluated, key=lambda c: c.memory)
        raise ParallelConfigError(f"no layout of {n} ranks fits memory_limit_gb={limit / 2 ** 30:.3g}: the smallest "
                                  f"needs {smallest.memory / 2 ** 30:.3g} GiB per rank ({_describe(smallest)})")
    best = min(fitting, key=lambda c: (c.step_time, c.memory))
    return best, evaluated, time.perf_counter() - start


def _describe(c):
    return (f"data_parallel={c.dp} x model_parallel={c.mp} x pipeline_stages={c.pp}, "
            f"micro_batch_num={c.micro_batch_num}, recompute={'on' if c.recompute else 'off'}, "
            f"optimizer shard={'on' if c.optimizer_shard else 'off'}")


_OPS = {"attention.qkv": "MatMul", "attention.core": "BatchMatMul", "attention.dense": "MatMul",
        "mlp.mapping": "MatMul", "mlp.projection": "MatMul"}


def shard_notation(op, strategy, dp, mp):
    """The strategy in MindSpore's `.shard()` notation."""
    if op == "attention.core":
        return f"(({dp}, {mp}, 1, 1), ({dp}, {mp}, 1, 1))" if strategy == "heads" else f"(({dp}, 1, 1, 1), ({dp}, 1, 1, 1))"
    return {"col": f"(({dp}, 1), (1, {mp}))", "row": f"(({dp}, {mp}), ({mp}, 1))",
            "tokens": f"(({dp * mp}, 1), (1, 1))", "none": f"(({dp}, 1), (1, 1))"}[strategy]


_PART_NAMES = {"compute_and_model_parallel": "stages", "dispatch_overhead": "of which dispatch",
               "model_parallel_comm": "of which model parallel comm"}


def format_plan(spec, n, best, evaluated, seconds, limit):
    gib = 2.0 ** 30
    lines = [f"plan for {n} ranks: {spec.num_layers} layers, hidden {spec.hidden_size}, heads {spec.num_heads}, "
             f"vocab {spec.vocab_size}, sequence {spec.seq_length}, global batch {spec.batch_size} "
             f"({spec.total_params() / 1e6:.1f}M parameters)",
             f"  layout: {_describe(best)}",
             f"  predicted step time: {best.step_time:.4g} s  (" +
             ", ".join(f"{_PART_NAMES.get(k, k.replace('_', ' '))} {v:.3g}" for k, v in best.breakdown.items()) + ")",
             f"  memory per rank: {best.memory / gib:.3g} GiB of {limit / gib:.3g} GiB  (" +
             ", ".join(f"{k.replace('_', ' ')} {v / gib:.3g}" for k, v in best.memory_breakdown.items()) + ")",
             "  operator strategies (every layer):"]
    for op, strategy in best.strategies.items():
        lines.append(f"    {op:<16} {_OPS[op]:<12} {strategy:<7} {shard_notation(op, strategy, best.dp, best.mp)}")
    runners = sorted((c for c in evaluated if c is not best and c.memory <= limit), key=lambda c: c.step_time)[:3]
    if runners:
        lines.append("  next best:")
        lines += [f"    {c.step_time:.4g} s, {c.memory / gib:.3g} GiB: {_describe(c)}" for c in runners]
    lines.append(f"  searched {len(evaluated)} layouts in {seconds:.3f} s")
    return "\n".join(lines)


def plan_json(best, spec, n, seconds):
    return {"ranks": n, "layout": best.layout(), "predicted_step_time_s": best.step_time,
            "memory_per_rank_bytes": best.memory, "memory_breakdown": best.memory_breakdown,
            "time_breakdown": best.breakdown,
            "operator_strategies": {op: {"strategy": s, "shard": shard_notation(op, s, best.dp, best.mp)}
                                    for op, s in best.strategies.items()},
            "search_seconds": seconds}
