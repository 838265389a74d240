"""The network's op graph with Cell scopes, and its repeated structure.

`capture_graph(network, *inputs)` runs one forward pass (inference mode, no gradients; the random
stream and the train flag are restored afterwards) and records every op call
with the Cell it ran in (scope: dotted attribute path, as `cells_and_names` names them, e.g.
'blocks.2.attn'), its inputs (earlier nodes, or 'external' for data and parameters) and shapes.

`repeated_subgraphs(graph)` groups Cell instances whose subgraphs are identical in structure (the
same Cell type, the same ops in the same order, wired the same way; shapes may differ, so the two
GCN layers of different widths are one group) and keeps the maximal groups: the N transformer
blocks form one group of N, not also groups of their inner layers. Each group: the scopes of its
instances, the node count of one instance and a structural hash.
"""
import hashlib

__all__ = ["capture_graph", "repeated_subgraphs", "cell_tree"]


class _Capture:
    """Observer protocol of dispatch.profiler: records op calls, with the Cell stack as scope."""

    def __init__(self, names):
        self.names = names
        self.stack = [""]
        self.nodes = []
        self.producer = {}

    def run_op(self, prim, inputs, attrs, run):
        result = run(prim, inputs, attrs)
        sources = [self.producer.get(id(x), -1) for x in inputs]
        outs = result if isinstance(result, tuple) else (result,)
        index = len(self.nodes)
        self.nodes.append({"id": index, "op": prim.name, "scope": self.stack[-1], "inputs": sources,
                           "shape": [list(getattr(o, "shape", ())) for o in outs]})
        for o in outs:
            self.producer[id(o)] = index
        return result

    def timed_batches(self, batches, feed=None):
        return batches

    def finish_round_trip(self):
        pass

    def worker_task(self, fn, name):
        return fn


def capture_graph(network, *inputs):
    """{'nodes': [...], 'cells': {scope: type name}} of one forward pass of `network` on `inputs`."""
    from ..autograd import no_grad
    from ..nn.cell import Cell
    from ..ops.primitive import dispatch
    from ..tensor import Tensor
    import numpy as np

    names = {id(cell): name for name, cell in network.cells_and_names()}
    capture = _Capture(names)
    original = Cell.__call__

    def scoped_call(cell, *args, **kwargs):
        capture.stack.append(names.get(id(cell), capture.stack[-1]))
        try:
            return original(cell, *args, **kwargs)
        finally:
            capture.stack.pop()
    tensors = [Tensor(np.asarray(x)) if isinstance(x, (np.ndarray, np.generic, list, float, int)) else x
               for x in inputs]  # other objects (a graph, a dict) are passed as they are
    from ..random import get_rng_state, set_rng_state
    running = dispatch.profiler  # a Profiler or Dumper: this extra forward pass is not theirs
    from ..context import PYNATIVE_MODE, get_context, set_context
    flags = [(cell, bool(getattr(cell, "training", False))) for _, cell in network.cells_and_names()]
    rng, mode = get_rng_state(), get_context("mode")
    set_context(mode=PYNATIVE_MODE)  # op by op, so every op passes the dispatch point
    network.set_train(False)  # inference: no dropout draws, no running-statistics updates
    from ..ops.summary_ops import discard_since, summary_mark
    mark = summary_mark()
    Cell.__call__ = scoped_call
    dispatch.profiler = capture
    try:
        with no_grad():
            network(*tensors)
    finally:
        dispatch.profiler = running
        Cell.__call__ = original
        for cell, flag in flags:  # pre-order: each cell ends with its own flag
            cell.set_train(flag)
        set_context(mode=mode)
        set_rng_state(rng)
        discard_since(mark)  # summary operators inside construct: not a training step's values  # the run goes on exactly as without the capture
    cells = {name: type(cell).__name__ for name, cell in network.cells_and_names()}
    return {"nodes": capture.nodes, "cells": cells}


def _within(scope, ancestor):
    return ancestor == "" or scope == ancestor or scope.startswith(ancestor + ".")


def _instance_signature(graph, scope):
    """(structural hash, node count) of the ops that ran inside `scope` (itself and below)."""
    nodes = [n for n in graph["nodes"] if _within(n["scope"], scope)]
    local = {n["id"]: i for i, n in enumerate(nodes)}
    cells = graph["cells"]
    parts = [cells.get(scope, "")]
    for n in nodes:
        relative = n["scope"][len(scope):].lstrip(".") if scope else n["scope"]
        sub_types = ".".join(cells.get(_join(scope, relative.split(".")[:k + 1]), "?")
                             for k in range(len(relative.split("."))) if relative)
        wiring = ",".join(str(local[s]) if s in local else "x" for s in n["inputs"])
        parts.append(f"{n['op']}({wiring})@{sub_types}")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16], len(nodes)


def _join(scope, parts):
    return ".".join(([scope] if scope else []) + parts)


def repeated_subgraphs(graph):
    """Maximal groups of structurally identical Cell instances (see the module docstring)."""
    used = {n["scope"] for n in graph["nodes"]}
    scopes = [s for s in graph["cells"] if s and any(_within(u, s) for u in used)]
    by_hash = {}
    for scope in scopes:
        digest, count = _instance_signature(graph, scope)
        if count >= 2:
            by_hash.setdefault(digest, []).append((scope, count))
    groups = [{"hash": digest, "instances": [s for s, _ in members], "node_count": members[0][1],
               "cell_type": graph["cells"][members[0][0]]}
              for digest, members in by_hash.items() if len(members) >= 2]
    groups = [g for g in groups if not any(
        other is not g and all(any(_within(i, o) and i != o for o in other["instances"]) for i in g["instances"])
        for other in groups)]
    groups = [g for g in groups if not _nested_in_own_group(g)]
    groups.sort(key=lambda g: (-g["node_count"] * len(g["instances"]), g["instances"][0]))
    return groups


def _nested_in_own_group(group):
    """A group whose instances contain each other (a cell and its only child) is not a repetition."""
    instances = group["instances"]
    return any(a != b and _within(b, a) for a in instances for b in instances)


def cell_tree(graph, groups):
    """The Cell hierarchy as nested dicts for the folded view: each node has 'scope', 'type', 'ops'
    (op names that ran directly in it), 'children'; instances of a repeated group are gathered
    under one 'group' node (type 'xN') placed where the first instance was."""
    children = {}
    for scope in graph["cells"]:
        if scope:
            parent = scope.rsplit(".", 1)[0] if "." in scope else ""
            children.setdefault(parent, []).append(scope)
    ops = {}
    for n in graph["nodes"]:
        ops.setdefault(n["scope"], []).append(n["op"])
    group_of = {i: g for g in groups for i in g["instances"]}

    def build(scope):
        node = {"scope": scope or "(network)", "type": graph["cells"].get(scope, ""), "ops": ops.get(scope, []),
                "children": []}
        placed = set()
        for child in children.get(scope, []):
            group = group_of.get(child)
            if group is None:
                node["children"].append(build(child))
            elif id(group) not in placed:
                placed.add(id(group))
                node["children"].append({"group": True, "scope": f"{group['cell_type']} x{len(group['instances'])}",
                                         "type": group["cell_type"], "hash": group["hash"],
                                         "node_count": group["node_count"], "ops": [],
                                         "children": [build(i) for i in group["instances"]]})
        return node
    return build("")
