"""The cost model of the strategy search: compute, communication volume and latency, memory.

Times are seconds per training step, memory is bytes per rank. A collective over n ranks
follows the ring algorithm:

    all_reduce(B)                 2 (n-1)/n * B / bandwidth + 2 (n-1) * latency + sync
    all_gather / reduce_scatter    (n-1)/n * B / bandwidth +   (n-1) * latency + sync  (B: the whole tensor)
    send (point to point)                    B / bandwidth +           latency + sync

where `sync` (`collective_sync`) is the wait for the ranks' drift that a blocking collective
pays when the ranks arrive from computing.

One transformer layer is a chain of operators; each matrix product is run by one strategy
over the model-parallel group of m ranks, and the activation between two operators has a
layout over that group:

    R  whole on every rank         C  split along its last axis (heads / features)
    T  split along its tokens      P  partial sums (after a product over a split axis)

Changing layout costs a collective (both passes counted: e.g. R -> C is a free slice forward and
an all-gather of the gradient backward). `layer_plan` picks the strategies by dynamic
programming over the chain; with m > 1 it finds Megatron's (column, row, column, row).

Compute is what the eager engine really spends: each matrix product at the FLOP rate measured
for its size (small products run far below peak), the elementwise work (layer norm, GELU,
attention softmax, adds, cross-entropy, optimizer) at measured seconds per element, and a
dispatch overhead per primitive call times the calls a layer makes, which dominates small
models on a CPU. `calibrate.py` measures all of it (`mstrain plan --calibrate`).
"""
import math
from dataclasses import dataclass

MATMUL_STRATEGIES = ("col", "row", "tokens", "none")


@dataclass(frozen=True)
class Hardware:
    """Per-rank compute, link bandwidth/latency and memory, and the eager engine's costs.

    Defaults: one core of the machine the suite is developed on (numpy fp32, one thread; MPI over
    shared memory), as `mstrain plan --calibrate` measured it; `calibrate.load_hardware()` gives
    this machine's own profile. Element costs are seconds per element, forward + backward.
    """
    flops: float = 1.1e11            # peak FLOP/s of matrix products
    matmul_curve: tuple = ((5.2e5, 0.77), (4.2e6, 0.96), (1.7e7, 1.0), (1.1e9, 0.91))
    # ((flops of one product, fraction of `flops` it runs at), ...) by size; empty: `flops` at every size
    memory_bandwidth: float = 6.0e10  # bytes/s of a large elementwise add
    bandwidth: float = 1.0e9         # bytes/s of one link in a collective
    latency: float = 5.0e-6          # s per collective step
    memory: float = 16 * 2.0 ** 30   # bytes per rank
    op_overhead: float = 5.5e-6      # s of eager dispatch per primitive call, forward + backward
    ops_per_layer: int = 137         # primitive calls (fwd + bwd) of one layer of mstrain.parallel.layers
    ops_fixed: int = 35              # ... of the embedding, LM head and loss
    norm_cost: float = 4.3e-9        # layer norm
    gelu_cost: float = 2.7e-9        # tanh-GELU
    attention_cost: float = 5.2e-9   # per attention score: scale, causal mask, softmax
    add_cost: float = 5.0e-10        # bias / residual add
    xent_cost: float = 7.0e-9        # per logit: softmax cross-entropy
    optimizer_cost: float = 1.1e-9   # per parameter element: one Adam update
    shared_slowdown: float = 1.0     # compute time x this per rank when several ranks share the machine
    collective_sync: float = 2.0e-4  # s each blocking collective / receive waits for the ranks' drift

    def product_rate(self, flop_count):
        """FLOP/s of one matrix product of `flop_count` flops: `flops` times the curve's fraction
        for that size (log-linear between measured sizes, constant beyond them)."""
        curve = self.matmul_curve
        if not curve:
            return self.flops
        if flop_count <= curve[0][0]:
            return self.flops * curve[0][1]
        for (f0, r0), (f1, r1) in zip(curve, curve[1:]):
            if flop_count <= f1:
                if f1 <= f0:
                    return self.flops * r1
                w = (math.log(flop_count) - math.log(f0)) / (math.log(f1) - math.log(f0))
                return self.flops * (r0 + w * (r1 - r0))
        return self.flops * curve[-1][1]

    def matmul_time(self, m, k, n, count=1):
        """Forward + backward seconds of `count` products (m, k) @ (k, n) (three products each)."""
        flops = 2.0 * m * k * n
        return 3 * count * flops / self.product_rate(flops) if flops else 0.0

    def all_reduce(self, nbytes, n):
        return 0.0 if n <= 1 else 2 * (n - 1) / n * nbytes / self.bandwidth + 2 * (n - 1) * self.latency + \
            self.collective_sync

    def all_gather(self, nbytes, n):
        return 0.0 if n <= 1 else (n - 1) / n * nbytes / self.bandwidth + (n - 1) * self.latency + \
            self.collective_sync

    reduce_scatter = all_gather

    def all_to_all(self, nbytes, n):
        return 0.0 if n <= 1 else (n - 1) / n * nbytes / n / self.bandwidth + (n - 1) * self.latency + \
            self.collective_sync

    def send(self, nbytes):
        return nbytes / self.bandwidth + self.latency + self.collective_sync


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
    """{strategy: (input layout, output layout, time, weight fraction held)} for (tokens, k) @ (k, n)
    plus its bias over m model-parallel ranks (forward + backward: three products each)."""
    weight = k * n * value_bytes
    opts = {"none": ("R", "R", hw.matmul_time(tokens, k, n) + hw.add_cost * tokens * n, 1.0)}
    if m > 1:
        act_in = tokens * k * value_bytes
        col = hw.matmul_time(tokens, k, n / m) + hw.add_cost * tokens * n / m
        row = hw.matmul_time(tokens, k / m, n) + hw.add_cost * tokens * n        # bias after the reduction
        by_tokens = hw.matmul_time(tokens / m, k, n) + hw.add_cost * tokens * n / m
        opts["col"] = ("R", "C", col + hw.all_reduce(act_in, m), 1.0 / m)          # input grad all-reduce
        opts["row"] = ("C", "P", row, 1.0 / m)
        opts["tokens"] = ("T", "T", by_tokens + hw.all_reduce(weight, m), 1.0)      # weight grad all-reduce
    return opts


def _share(elements, m, layout):
    return elements / m if layout in ("C", "T") else elements


def _edge_time(hw, elements, m, layout, norm=True):
    """A residual add and (when `norm`) the next LayerNorm over the residual stream."""
    return _share(elements, m, layout) * (hw.add_cost + (hw.norm_cost if norm else 0.0))


@dataclass
class LayerPlan:
    strategies: dict      # operator -> strategy name
    time: float           # forward + backward seconds of one layer on one micro-batch
    comm_time: float      # the model-parallel communication part of `time`
    weight_fraction: float  # fraction of the layer's weights one rank holds
    activation_bytes: float  # bytes one rank keeps for backward (no recompute)
    boundary: str         # layout of the residual stream between layers
    dispatch_time: float = 0.0  # the eager per-call overhead part of `time`


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
    states = {boundary: (_share(t * h, m, boundary) * hw.norm_cost, 0.0, 0.0, 0.0, {})}
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
                if name == "mlp.mapping":  # GELU over the (t, ffn) output
                    op_time += _share(t * n, m, out) * hw.gelu_cost
                move = redistribution_time(hw, layout, need, in_bytes, m)
                held = weight + (0.0 if k is None else k * n * vb * fraction)
                keep = stored + in_bytes / (m if need in ("C", "T") else 1) + (extra[0] if extra else 0.0)
                cost = (time + move + op_time, comm + move + _comm_part(hw, strategy, t, k, n, m, vb),
                        held, keep, {**choices, name: strategy})
                if out not in new or cost[0] < new[out][0]:
                    new[out] = cost
        if name == "attention.dense":  # residual add: back to the boundary layout, then LayerNorm
            new = _to_boundary(hw, new, boundary, resid, t * h, m, norm=True)
        states = new
    states = _to_boundary(hw, states, boundary, resid, t * h, m, norm=False)
    time, comm, held, stored, choices = states[boundary]
    dispatch = hw.ops_per_layer * hw.op_overhead  # forward + backward dispatch of every primitive call
    return LayerPlan(choices, time + dispatch, comm, held / max(total_weight, 1.0), stored, boundary, dispatch)


def _to_boundary(hw, states, boundary, resid, elements, m, norm):
    out = {}
    for layout, (time, comm, held, stored, choices) in states.items():
        move = redistribution_time(hw, layout, boundary, resid, m)
        cost = (time + move + _edge_time(hw, elements, m, boundary, norm), comm + move, held, stored, choices)
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


_HEAD_COPIES = 5  # q, k, v into heads, k transposed, the context out of heads: one copy pass each


def _attention_options(hw, spec, m, micro_batch):
    """Scores, softmax and context: heads split (input C) or whole (R). The batched products run
    one (s, d) x (d, s) product per sequence and head, at that product size's rate."""
    vb, s, a, h = spec.bytes_per_value, spec.seq_length, spec.num_heads, spec.hidden_size
    d, heads = h / a, micro_batch * a
    products = hw.matmul_time(s, d, s, count=heads) + hw.matmul_time(s, s, d, count=heads)
    elementwise = hw.attention_cost * heads * s * s + hw.add_cost * _HEAD_COPIES * micro_batch * s * h
    scores = heads * s * s * vb
    opts = {"none": ("R", "R", products + elementwise, 0.0, 2 * scores)}
    if m > 1 and a % m == 0:
        opts["heads"] = ("C", "C", (products + elementwise) / m, 0.0, 2 * scores / m)
    return opts


def head_time(hw, spec, tokens, m, slowdown=1.0):
    """Forward + backward seconds of the embedding lookup, final LayerNorm, LM head product and
    softmax cross-entropy for `tokens` tokens, vocabulary split over m ranks, with their dispatch
    and (m > 1) their collectives: the embedding's partial rows and the head input's gradient
    all-reduced, and three per-token all-reduces of the vocabulary-parallel loss. `slowdown`
    scales the compute (ranks sharing the machine)."""
    h, v, vb = spec.hidden_size, spec.vocab_size, spec.bytes_per_value
    comm = 2 * hw.all_reduce(tokens * h * vb, m) + 3 * hw.all_reduce(tokens * vb, m)
    compute = (hw.matmul_time(tokens, h, v / m) + hw.xent_cost * tokens * v / m + hw.norm_cost * tokens * h
               + 2 * hw.add_cost * tokens * h + hw.ops_fixed * hw.op_overhead)
    return compute * slowdown + comm


def optimizer_time(hw, spec, param_elements, layers):
    """One update of `param_elements` parameter elements held in the tensors of `layers` layers
    (16 tensors each: q, k, v, dense, mapping, projection weights and biases, two LayerNorms)
    plus the embedding, positions and head."""
    return param_elements * hw.optimizer_cost + (16 * layers + 5) * hw.op_overhead
