"""The cost model of the strategy search: compute, communication volume and latency, memory.

Times are seconds per training step, memory is bytes per rank. A collective over n ranks
follows the ring algorithm:

    all_reduce(B)                 2 (n-1)/n * B / bandwidth + 2 (n-1) * latency
    all_gather / reduce_scatter    (n-1)/n * B / bandwidth +   (n-1) * latency   (B: the whole tensor)
    send (point to point)                    B / bandwidth +           latency

One transformer layer is a chain of operators; each matrix product is run by one strategy
over the model-parallel group of m ranks, and the activation between two operators has a
layout over that group:

    R  whole on every rank         C  split along its last axis (heads / features)
    T  split along its tokens      P  partial sums (after a product over a split axis)

Changing layout costs a collective (both passes counted: e.g. R -> C is a free slice forward and
an all-gather of the gradient backward). `layer_plan` picks the strategies by dynamic
programming over the chain; with m > 1 it finds Megatron's (column, row, column, row).
"""
from dataclasses import dataclass

MATMUL_STRATEGIES = ("col", "row", "tokens", "none")
_OPS_PER_LAYER = 50  # primitive calls of one eager transformer layer (layer norms, products, softmax, ...)
_NORM_PASSES = 6     # elementwise passes over the residual stream per block: layer norm and residual add
_GELU_PASSES = 8     # passes of the activation (tanh-GELU) over the expanded features


@dataclass(frozen=True)
class Hardware:
    """Per-rank compute, link bandwidth/latency and memory. Defaults: one CPU core of numpy fp32
    and MPI over shared memory, as on the machine the suite is developed on."""
    flops: float = 2.0e10          # sustained FLOP/s of one rank
    memory_bandwidth: float = 5.0e9  # bytes/s for elementwise work
    bandwidth: float = 2.0e9       # bytes/s of one link in a collective
    latency: float = 2.0e-5        # s per collective step
    memory: float = 16 * 2.0 ** 30  # bytes per rank
    op_overhead: float = 3.0e-5    # s of dispatch per operator, forward + backward (eager Python)

    def all_reduce(self, nbytes, n):
        return 0.0 if n <= 1 else 2 * (n - 1) / n * nbytes / self.bandwidth + 2 * (n - 1) * self.latency

    def all_gather(self, nbytes, n):
        return 0.0 if n <= 1 else (n - 1) / n * nbytes / self.bandwidth + (n - 1) * self.latency

    reduce_scatter = all_gather

    def all_to_all(self, nbytes, n):
        return 0.0 if n <= 1 else (n - 1) / n * nbytes / n / self.bandwidth + (n - 1) * self.latency

    def send(self, nbytes):
        return nbytes / self.bandwidth + self.latency


@dataclass(frozen=True)
class TransformerSpec:
    """A GPT-style decoder: the numbers the search needs."""
    num_layers: int
    hidden_size: int
    num_heads: int
    vocab_size: int
    seq_length: int
    batch_size: int                # global batch (sequences per step)
    ffn_hidden_size: int = 0       # 0: 4 * hidden_size
    bytes_per_value: int = 4

    @property
    def ffn(self):
        return self.ffn_hidden_size or 4 * self.hidden_size

    def layer_params(self):
        h, f = self.hidden_size, self.ffn
        return 3 * h * h + 3 * h + h * h + h + h * f + f + f * h + h + 4 * h

    def total_params(self):
        return self.num_layers * self.layer_params() + self.vocab_size * self.hidden_size + \
            self.seq_length * self.hidden_size + 2 * self.hidden_size


# ---- redistribution between activation layouts --------------------------------------------------

def redistribution_time(hw, src, dst, nbytes, m):
    """Forward + backward cost of changing an activation of `nbytes` (whole) from src to dst."""
    if m <= 1 or src == dst:
        return 0.0
    gather, reduce_, scatter = hw.all_gather(nbytes, m), hw.all_reduce(nbytes, m), hw.reduce_scatter(nbytes, m)
    table = {
        ("P", "R"): reduce_,                   # all-reduce forward, identity backward
        ("P", "T"): scatter + gather,          # reduce-scatter forward, all-gather backward
        ("P", "C"): reduce_ + gather,
        ("R", "C"): gather, ("R", "T"): gather,  # free slice forward, all-gather backward
        ("C", "R"): gather, ("T", "R"): gather,  # all-gather forward, slice backward
        ("C", "T"): 2 * hw.all_to_all(nbytes, m), ("T", "C"): 2 * hw.all_to_all(nbytes, m),
    }
    return table[(src, dst)]


# ---- one operator --------------------------------------------------------------------------------

def matmul_options(hw, tokens, k, n, m, value_bytes):
    """{strategy: (input layout, output layout, time, weight fraction held, mirror bytes)} for
    (tokens, k) @ (k, n) over m model-parallel ranks (forward + backward = 3x the forward flops)."""
    flops = 3 * 2.0 * tokens * k * n
    weight = k * n * value_bytes
    full = flops / hw.flops
    opts = {"none": ("R", "R", full, 1.0)}
    if m > 1:
        act_in = tokens * k * value_bytes
        opts["col"] = ("R", "C", full / m + hw.all_reduce(act_in, m), 1.0 / m)      # input grad all-reduce
        opts["row"] = ("C", "P", full / m, 1.0 / m)
        opts["tokens"] = ("T", "T", full / m + hw.all_reduce(weight, m), 1.0)       # weight grad all-reduce
    return opts


def _elementwise_time(hw, nbytes, m, layout):
    share = nbytes / m if layout in ("C", "T") else nbytes
    return 3 * share / hw.memory_bandwidth


@dataclass
class LayerPlan:
    strategies: dict      # operator -> strategy name
    time: float           # forward + backward seconds of one layer on one micro-batch
    comm_time: float      # the model-parallel communication part of `time`
    weight_fraction: float  # fraction of the layer's weights one rank holds
    activation_bytes: float  # bytes one rank keeps for backward (no recompute)
    boundary: str         # layout of the residual stream between layers


def _chain(spec):
    h, f = spec.hidden_size, spec.ffn
    return [("attention.qkv", h, 3 * h), ("attention.core", None, None), ("attention.dense", h, h),
            ("mlp.mapping", h, f), ("mlp.projection", f, h)]


def layer_plan(hw, spec, m, micro_batch):
    """The cheapest strategies of one layer for `micro_batch` sequences over m ranks."""
    best = None
    for boundary in (("R", "T") if m > 1 else ("R",)):
        plan = _best_chain(hw, spec, m, micro_batch, boundary)
        if best is None or plan.time < best.time:
            best = plan
    return best


def _best_chain(hw, spec, m, micro_batch, boundary):
    """Dynamic programming over the operator chain of one block pair (attention, then MLP)."""
    vb, t, h = spec.bytes_per_value, micro_batch * spec.seq_length, spec.hidden_size
    resid = t * h * vb
    # states: layout -> (time, comm, weight_bytes_held, stored_bytes, choices)
    states = {boundary: (_NORM_PASSES * _elementwise_time(hw, resid, m, boundary), 0.0, 0.0, 0.0, {})}
    total_weight = 0.0
    for name, k, n in _chain(spec):
        new = {}
        if name == "attention.core":
            options = _attention_options(hw, spec, m, micro_batch)
            in_bytes = t * 3 * h * vb
        else:
            options = matmul_options(hw, t, k, n, m, vb)
            in_bytes = t * k * vb
            total_weight += k * n * vb
        for layout, (time, comm, weight, stored, choices) in states.items():
            for strategy, (need, out, op_time, fraction, *extra) in options.items():
                if name == "mlp.mapping":  # bias and GELU over the (t, ffn) output
                    op_time += _GELU_PASSES * _elementwise_time(hw, t * n * vb, m, out)
                move = redistribution_time(hw, layout, need, in_bytes, m)
                held = weight + (0.0 if k is None else k * n * vb * fraction)
                keep = stored + in_bytes / (m if need in ("C", "T") else 1) + (extra[0] if extra else 0.0)
                cost = (time + move + op_time, comm + move + _comm_part(hw, strategy, t, k, n, m, vb),
                        held, keep, {**choices, name: strategy})
                if out not in new or cost[0] < new[out][0]:
                    new[out] = cost
        if name == "attention.dense":  # residual add: back to the boundary layout, then LayerNorm
            new = _to_boundary(hw, new, boundary, resid, m)
        states = new
    states = _to_boundary(hw, states, boundary, resid, m)
    time, comm, held, stored, choices = states[boundary]
    time += _OPS_PER_LAYER * hw.op_overhead  # forward + backward dispatch of every operator
    return LayerPlan(choices, time, comm, held / max(total_weight, 1.0), stored, boundary)


def _to_boundary(hw, states, boundary, resid, m):
    out = {}
    for layout, (time, comm, held, stored, choices) in states.items():
        move = redistribution_time(hw, layout, boundary, resid, m)
        cost = (time + move + _NORM_PASSES * _elementwise_time(hw, resid, m, boundary), comm + move, held, stored,
                choices)
        if boundary not in out or cost[0] < out[boundary][0]:
            out[boundary] = cost
    return out


def _comm_part(hw, strategy, t, k, n, m, vb):
    if k is None or m <= 1:
        return 0.0
    if strategy == "col":
        return hw.all_reduce(t * k * vb, m)
    if strategy == "tokens":
        return hw.all_reduce(k * n * vb, m)
    return 0.0


def _attention_options(hw, spec, m, micro_batch):
    """Scores, softmax and context: heads split (input C) or whole (R)."""
    vb, s, a, h = spec.bytes_per_value, spec.seq_length, spec.num_heads, spec.hidden_size
    flops = 3 * 2 * 2.0 * micro_batch * s * s * h          # two batched products, fwd + bwd
    scores = micro_batch * a * s * s * vb
    soft = 3 * 6 * scores / hw.memory_bandwidth  # scale, mask, softmax (about 6 passes), fwd + bwd
    opts = {"none": ("R", "R", flops / hw.flops + soft, 0.0, 2 * scores)}
    if m > 1 and a % m == 0:
        opts["heads"] = ("C", "C", (flops / hw.flops + soft) / m, 0.0, 2 * scores / m)
    return opts
