"""Graph kernel fusion: expand composites, group elementwise/reduction chains, one C++ kernel each.

`expand_composites` writes softmax, layer norm, cross-entropy, dropout masks and optimizer
updates in basic ops (see expand.py and expand_optim.py). `fuse_kernels` then walks the graph in
order and grows groups over an iteration shape S:

  - an elementwise op with a `cpp` template joins the group of an input when its output has
    shape S ("full" values) or, in a group with reductions, S[:-1] + (1,) ("row" values);
  - a sum/mean/max/min over the last axis joins the group of its input and makes it a row kernel;
  - an in-place `assign` of a group value to a Parameter or optimizer state of shape S joins too,
    so an optimizer update becomes one kernel writing parameter and moments where they are;
  - a float sum over every axis but the last (`sum_to` a parameter's shape, `sum` over the leading
    axes: the gradients of a norm's scale and shift, of a bias) joins, once the groups are formed,
    a group that computes or reads its input, as a column sum: the kernel adds each row into it as
    it goes, so a product only summed (g * xhat for a layer norm's scale) is never written, and a
    gradient's sums come out of the pass that reads it anyway (a layer norm's backward row kernel
    reads g and xhat: the small group computing g * xhat joins it with both sums).

Groups never span another in-place update, and a group is not formed when one of its inputs
depends on its own members (that would be a cycle). Each group becomes one `fused` node.
"""
import heapq

import numpy as np

from .codegen_c import SUPPORTED
from .expand import Builder
from .group import FusedGroup
from .ir import Graph, Node, rewrite
from ..ops.primitive import REGISTRY
from . import lowering  # noqa: F401  (registers the out= kernels on their primitives)

_REDUCTIONS = ("sum", "mean", "max", "min")


def expand_composites(graph):
    """Replace composite primitives by their expansions (see expand.py)."""
    builder, expanded = Builder(), {}

    def rule(node):
        if node.op == "project" and id(node.inputs[0]) in expanded:
            return expanded[id(node.inputs[0])][node.value]
        if node.op != "call":
            return None
        expander = node.prim.expander
        result = expander(builder, node) if expander else None
        if isinstance(result, tuple):
            expanded[id(node)] = result
            return None
        return result
    return rewrite(graph, rule)


# ---------------------------------------------------------------------------------------------
# Which nodes may join a group
# ---------------------------------------------------------------------------------------------

def _scalar_const(node):
    return node.op == "const" and node.dtype is None and isinstance(node.value, (bool, int, float))


def _typed_inputs(node):
    return all(_scalar_const(i) or (i.dtype in SUPPORTED and i.shape is not None) for i in node.inputs)


def _last_axis(node):
    axis = node.attrs.get("axis")
    ndim = len(node.inputs[0].shape)
    if isinstance(axis, (tuple, list)) and len(axis) == 1:
        axis = axis[0]
    return ndim > 0 and isinstance(axis, (int, np.integer)) and axis % ndim == ndim - 1


def _column_sum(node):
    """A float sum over every axis of its input but the last (a `sum_to` or `sum`, any keepdims),
    whose rows a generated kernel can add up as it computes them (mstrain.graph.codegen_reduce)."""
    if node.prim.name not in ("sum_to", "sum") or node.dtype not in (np.float32, np.float64):
        return False
    shape = node.inputs[0].shape
    if node.inputs[0].dtype != node.dtype or len(shape) < 2 or shape[-1] < 2 or np.prod(shape[:-1]) < 2:
        return False
    if node.size != shape[-1] or (node.shape and node.shape[-1] != shape[-1]):
        return False
    if node.prim.name == "sum_to":
        return True
    axis = node.attrs.get("axis")
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis or ())
    return sorted(a % len(shape) for a in axes) == list(range(len(shape) - 1))


def _sum_of_reshaped_rows(node):
    """A column sum of `reshape_to(v)` that keeps v's last axis (a dense layer's bias gradient: the
    (B*T, C) view of a (B, T, C) elementwise gradient summed over its rows) as `sum_to(v, shape)`:
    the same rows in the same order, and now the sum can join the kernel that computes v."""
    if node.op != "call" or node.prim.kind != "reduce" or not _typed_inputs(node) or not _column_sum(node):
        return None
    x = node.inputs[0]
    if x.op != "call" or x.prim.name != "reshape_to":
        return None
    v = x.inputs[0]  # computed by a kernel (not a product, whose readers read the reshaped view)
    if _kind(v) != "elementwise" or len(v.shape) < 2 or v.shape[-1] != x.shape[-1] or v.dtype != x.dtype:
        return None
    return Node("call", (v,), REGISTRY["sum_to"], {"shape": tuple(node.shape)}, shape=node.shape, dtype=node.dtype)


def _kind(node):
    """'elementwise', 'reduce', 'column', 'assign' or None (not fusible)."""
    if node.op != "call" or not _typed_inputs(node):
        return None
    if node.prim.name == "assign":
        return "assign"
    if not node.is_pure or node.dtype not in SUPPORTED:
        return None
    if node.prim.kind == "reduce" and _column_sum(node):
        return "column"
    if node.prim.kind == "elementwise" and node.prim.cpp is not None:
        return "elementwise"
    if node.prim.kind == "reduce" and node.prim.name in _REDUCTIONS and node.inputs[0].shape:
        if _last_axis(node) and node.inputs[0].shape[-1] > 1:
            return "reduce"
        return "reduction"  # over other axes: a kernel of its own
    return None


# ---------------------------------------------------------------------------------------------
# Grouping
# ---------------------------------------------------------------------------------------------

class _Group:
    def __init__(self, shape, epoch, mode=None):
        self.shape = tuple(shape)
        self.epoch = epoch
        self.members = []
        self.ids = set()
        self.reduce = False
        self.mode = mode  # None (still growing), 'axes' (a lone reduction) or 'columns' (column sums)
        self.columns = []  # sums over every axis but the last, added up as the rows are computed

    @property
    def row_shape(self):
        return self.shape[:-1] + (1,)

    def add(self, node):
        self.members.append(node)
        self.ids.add(id(node))

    def is_row(self, node):
        return self.reduce and tuple(node.shape) != self.shape


def _fits(group, node, kind):
    """Can `node` join `group`: same iteration shape, inputs from the group in a usable domain."""
    if kind == "reduce":
        x = node.inputs[0]
        return tuple(x.shape) == group.shape and not group.is_row(x)
    if kind == "assign":
        target, value = node.inputs
        return (id(value) in group.ids and tuple(target.shape) == group.shape and target.op == "resident"
                and not group.is_row(value))
    shape = tuple(node.shape)
    if shape == group.shape:
        row = False
    elif group.reduce and shape == group.row_shape:
        row = True
    else:
        return False
    for i in node.inputs:
        if id(i) in group.ids and group.is_row(i):
            if tuple(i.shape) != group.row_shape:
                return False  # a reduction without keepdims: only usable outside the group
        elif id(i) in group.ids and row:
            return False      # a full-shape value cannot feed a one-per-row value
    return True


def _state_dependencies(graph):
    """The orderings in-place writes impose beyond data edges, as two {id(node): [earlier nodes]}:
    `raw`, the write of a resident a later reader must see (the reader takes the resident node,
    not the write, as input), and `war`, the reads of the previous version a write must not
    overtake. CSE keeps such reads apart (state versions); grouping and scheduling must too."""
    last_write, readers, raw, war = {}, {}, {}, {}
    for n in graph.nodes:
        written = {id(t) for t in n.mutated()}
        for i in n.inputs:
            if i.op == "resident" and id(i) not in written:
                if id(i) in last_write:
                    raw.setdefault(id(n), []).append(last_write[id(i)])
                readers.setdefault(id(i), []).append(n)
        for target in n.mutated():
            war.setdefault(id(n), []).extend(r for r in readers.pop(id(target), []) if r is not n)
            if id(target) in last_write:  # a second write must follow the first, in another kernel
                raw.setdefault(id(n), []).append(last_write[id(target)])
            last_write[id(target)] = n
    return raw, war


def _depends_on(start_nodes, member_ids, lowest, pos, ordered_after):
    """True when any of `start_nodes` (reading back through inputs, state orderings and collective
    order edges) reaches a member."""
    stack, seen = list(start_nodes), set()
    while stack:
        n = stack.pop()
        if id(n) in member_ids:
            return True
        if id(n) in seen or pos[id(n)] < lowest:
            continue
        seen.add(id(n))
        stack.extend(n.inputs)
        stack.extend(ordered_after(n))
    return False


def _acyclic(groups, node, pos, raw, war, after):
    """Merging `groups` with `node` creates no path member -> outside node -> member, and puts no
    read of a resident in the kernel that writes it before (the kernel reads its inputs first).
    Collective order edges count as paths: a backward seeded by a collective (whose data input is
    a constant) still runs after the collectives before it, so it cannot share a kernel with the
    forward they read."""
    ids = set().union(*[g.ids for g in groups])
    members = [m for g in groups for m in g.members] + [node]
    if any(id(w) in ids for m in members for w in raw.get(id(m), ())):
        return False
    lowest = min([pos[id(g.members[0])] for g in groups] + [pos[id(node)]])
    ordered_after = lambda n: raw.get(id(n), []) + war.get(id(n), []) + list(after.get(id(n), ()))  # noqa: E731
    outside = [i for m in members for i in list(m.inputs) + ordered_after(m) if id(i) not in ids]
    return not _depends_on(outside, ids, lowest, pos, ordered_after)


def _joinable(candidates, node, pos, raw, war, after):
    """The groups `node` joins: all its candidates when merging them is acyclic, else the latest one
    that is (a layer norm's backward reads the forward's kernel and the gradient's: merging both
    would close a cycle through the matrix products between them, but it still joins the latter)."""
    if not candidates or _acyclic(candidates, node, pos, raw, war, after):
        return candidates
    for group in sorted(candidates, key=lambda g: -pos[id(g.members[-1])]):
        if _acyclic([group], node, pos, raw, war, after):
            return [group]
    return []


def _form_groups(graph, pos, raw, war):
    group_of, groups, epoch, columns = {}, [], 0, []
    after = _order_edges(graph)
    for node in graph.nodes:
        kind = _kind(node)
        if kind is None:
            if node.is_effect:
                epoch += 1  # nothing may be computed across a write it is not part of
            continue
        if kind == "column":
            columns.append((node, epoch))  # placed once every group is complete (_add_column_sums)
            continue
        if kind == "reduction":
            group = _Group(node.inputs[0].shape, epoch, mode="axes")
            group.add(node)
            groups.append(group)
            continue  # nothing joins it: its output is consumed outside
        candidates = []
        for i in node.inputs:
            g = group_of.get(id(i))
            if g is not None and g.epoch == epoch and g.mode is None and g not in candidates and _fits(g, node, kind):
                candidates.append(g)
        candidates = _joinable(candidates, node, pos, raw, war, after)
        if candidates:
            group = candidates[0]
            for other in candidates[1:]:
                for m in other.members:
                    group.add(m)
                    group_of[id(m)] = group
                group.reduce |= other.reduce
                groups.remove(other)
            group.members.sort(key=lambda n: pos[id(n)])
        elif kind == "assign":
            epoch += 1
            continue
        else:
            group = _Group(node.inputs[0].shape if kind == "reduce" else node.shape, epoch)
            groups.append(group)
        group.add(node)
        group.reduce |= kind == "reduce"
        group_of[id(node)] = group
    _add_column_sums(columns, groups, group_of, (pos, raw, war, after))
    return [g for g in groups if _worth_a_kernel(g)]


def _externals(group):
    return {id(i) for m in group.members for i in m.inputs if id(i) not in group.ids}


def _column_hosts(x, epoch, groups, group_of, pos, externals):
    """Where `x` could be added up as it is computed or read, as lists of groups to merge (the host
    first), best first. For a computed value: a row kernel reading every input of the group that
    computes it (a layer norm's g * xhat joins the backward reading g and xhat), then that group.
    For an input: a group reading it that already holds column sums (one pass for all sums of a
    gradient), then row kernels, then the latest. `externals`: each group's `_externals`."""
    def usable(g):
        return g.mode in (None, "columns") and g.epoch == epoch and g.shape == tuple(x.shape)
    own = group_of.get(id(x))
    if own is not None:
        if not usable(own):
            return []
        if own.reduce:
            return [[own]]
        needs = externals[own]
        rows = [g for g in groups if g is not own and usable(g) and g.reduce and needs <= externals[g]]
        return [[g, own] for g in sorted(rows, key=lambda g: -pos[id(g.members[-1])])] + [[own]]
    readers = [g for g in groups if usable(g) and id(x) in externals[g]]
    return [[g] for g in sorted(readers, key=lambda g: (not g.columns, not g.reduce, -pos[id(g.members[-1])]))]


def _add_column_sums(columns, groups, group_of, order):
    """Each column sum joins a host that does not read it and where it closes no cycle; a `sum` left
    alone is a reduction kernel of its own, a `sum_to` the C step loop's row sum."""
    pos = order[0]
    columns = sorted(columns, key=lambda c: id(c[0].inputs[0]) not in group_of)  # sums of computed values first
    externals = {g: _externals(g) for g in groups}  # kept up to date as sums merge groups
    for node, epoch in columns:
        for hosts in _column_hosts(node.inputs[0], epoch, groups, group_of, pos, externals):
            reads = any(i is node for g in hosts for m in g.members for i in m.inputs)
            if not reads and _acyclic(hosts, node, *order):
                _merge_into(hosts, groups, group_of, pos, node)
                for merged in hosts[1:]:
                    del externals[merged]
                externals[hosts[0]] = _externals(hosts[0])
                break
        else:
            if node.prim.name == "sum":
                group = _Group(node.inputs[0].shape, epoch, mode="axes")
                group.add(node)
                groups.append(group)
                externals[group] = _externals(group)


def _merge_into(hosts, groups, group_of, pos, column):
    host = hosts[0]
    for other in hosts[1:]:
        for m in other.members:
            host.add(m)
            group_of[id(m)] = host
        host.columns += other.columns
        groups.remove(other)
    host.add(column)
    host.columns.append(column)
    host.members.sort(key=lambda n: pos[id(n)])
    host.mode = None if host.reduce else "columns"  # a row kernel stays one, with column sums
    group_of[id(column)] = host


def _worth_a_kernel(group):
    """Every group with a reduction or an in-place write is (so the C step loop stays in C), and so
    is a lone elementwise op: left to numpy, the C step loop calls back into Python for it (a bias
    add, a layer-norm backward product; in a step with collectives that call holds up every other
    rank), and the generated loop beats numpy's broadcasting `out=` kernels and its scalar float16
    loops (a ViT step: 77 such ops: 15 ms in numpy, 12 ms as kernels, and no callbacks)."""
    calls = [m for m in group.members if m.prim.name != "assign"]
    if len(calls) > 1 or group.reduce or group.mode == "axes" or len(calls) < len(group.members):
        return True
    return len(calls) == 1 and calls[0].prim.kind == "elementwise"


# ---------------------------------------------------------------------------------------------
# Rebuilding the graph around fused nodes
# ---------------------------------------------------------------------------------------------

def _group_outputs(group, users, graph_outputs):
    """Members read outside the group (or returned by the graph)."""
    return [m for m in group.members if m.prim.name != "assign" and
            (id(m) in graph_outputs or any(id(u) not in group.ids for u in users[id(m)]))]


def _fused_nodes(graph, group, index, users):
    """The fused node, its projections, and {id(member output): node now standing for it}."""
    outputs = _group_outputs(group, users, {id(o) for o in graph.outputs})
    fused = FusedGroup(f"fused{index}", group.members, outputs, group.shape, group.reduce, group.mode,
                       group.columns)
    single = len(outputs) == 1
    node = Node("fused", fused.node_inputs, value=fused,
                shape=outputs[0].shape if single else None, dtype=outputs[0].dtype if single else None)
    if single:
        return [node], {id(outputs[0]): node}
    projections = [Node("project", (node,), value=k, shape=o.shape, dtype=o.dtype) for k, o in enumerate(outputs)]
    return [node] + projections, {id(o): p for o, p in zip(outputs, projections)}


def _ordered(entries, deps):
    """Kahn's algorithm: dependencies first, otherwise the original order (lowest priority first)."""
    by_id = {id(n): (prio, n) for prio, n in entries}
    pending, users = {}, {}
    for key, (_, n) in by_id.items():
        inputs = {id(i) for i in deps(n) if id(i) in by_id}
        pending[key] = len(inputs)
        for i in inputs:
            users.setdefault(i, []).append(key)
    heap = [(by_id[k][0], k) for k, count in pending.items() if count == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, key = heapq.heappop(heap)
        order.append(by_id[key][1])
        for u in users.get(key, ()):
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(heap, (by_id[u][0], u))
    if len(order) != len(by_id):
        raise RuntimeError(f"fusion: {len(by_id) - len(order)} nodes wait on each other (a cyclic schedule)")
    return order


def _order_edges(graph):
    """Random draws and in-place writes keep their relative order: each waits for the previous."""
    edges, previous = {}, None
    for n in graph.nodes:
        if n.is_effect or (n.op == "call" and n.prim.stateful):
            if previous is not None:
                edges[id(n)] = [previous]
            previous = n
    return edges


def fuse_kernels(graph):
    """Replace each fusion group by one `fused` node (see the module docstring)."""
    graph = rewrite(graph, _sum_of_reshaped_rows)
    pos = {id(n): k for k, n in enumerate(graph.nodes)}
    raw, war = _state_dependencies(graph)
    groups = _form_groups(graph, pos, raw, war)
    if not groups:
        return graph
    members = {id(m) for g in groups for m in g.members}
    replace, entries, users, kernel_of, members_of = {}, [], graph.users(), {}, {}
    for index, group in enumerate(groups):
        new_nodes, outputs = _fused_nodes(graph, group, index, users)
        replace.update(outputs)
        kernel_of.update((id(m), new_nodes[0]) for m in group.members)
        members_of[id(new_nodes[0])] = group.members
        last = max(pos[id(m)] for m in group.members)
        entries += [((last, k), n) for k, n in enumerate(new_nodes)]
    entries += [((pos[id(n)], 0), n) for n in graph.nodes if id(n) not in members]
    order_after = _order_edges(graph)
    data = lambda n: [replace.get(id(i), i) for i in n.inputs]  # noqa: E731

    def after(n):  # a kernel follows the state orderings of its members
        state = [kernel_of.get(id(e), e) for m in members_of.get(id(n), (n,))
                 for e in raw.get(id(m), []) + war.get(id(m), [])]
        return data(n) + order_after.get(id(n), []) + [e for e in state if e is not n]
    mapping, nodes = {}, []
    for n in _ordered(entries, after):
        inputs = [mapping.get(id(i), i) for i in data(n)]
        copy = n if all(a is b for a, b in zip(inputs, n.inputs)) else n.with_inputs(inputs)
        mapping[id(n)] = copy
        nodes.append(copy)
    final = lambda n: mapping.get(id(replace.get(id(n), n)), replace.get(id(n), n))  # noqa: E731
    effects = [n for n in nodes if n.is_effect]
    return Graph(graph.name, nodes, [final(i) for i in graph.inputs], [final(o) for o in graph.outputs], effects)
