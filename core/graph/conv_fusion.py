"""Convolutional networks' batch norm and activation as one pass: the graph pass `fuse_batch_norm_relu`.

A training-mode batch norm followed by a ReLU, directly or through a residual add,

    y = batch_norm_train!(x, gamma, beta, mean, var)      y = batch_norm_train!(x, ...)
    r = relu(y)                                           s = add(y, shortcut);  r = relu(s)

becomes one call that writes r in the pass that applies the batch statistics
(batch_norm_relu_train! / batch_norm_add_relu_train!): y and s are never written, nor read again by
a separate ReLU kernel. The pass runs on the differentiated step, whose ReLU gradients read the ReLU's
input, relu_grad(g, y); they read r instead (r > 0 exactly where y > 0, NaN included), so nothing
needs y or s any more. The fusion applies only when y (and s) have no other reader, s adds two arrays
of one shape and dtype, and nothing else reads the moving statistics, whose update moves from the
batch norm's place in the step to the ReLU's.
"""
from ..ops.primitive import get as get_primitive
from .ir import Graph, Node


def _is_call(node, name):
    return node.op == "call" and node.prim.name == name


def _only_relu_readers(node, relu, users):
    """Every reader of `node` is `relu` itself or the second operand of a relu_grad."""
    readers = users.get(id(node), [])
    return relu in readers and all(r is relu or (_is_call(r, "relu_grad") and r.inputs[1] is node
                                                 and r.inputs[0] is not node) for r in readers)


def _batch_norm_with_private_statistics(node, users):
    """A batch_norm_train whose moving statistics nothing else reads."""
    return _is_call(node, "batch_norm_train") and all(users.get(id(m), []) == [node] for m in node.inputs[3:5])


def _match(relu, users, outputs):
    """(batch norm, add or None, residual or None) that `relu` ends, or None."""
    y = relu.inputs[0]
    if id(y) in outputs:
        return None
    if _batch_norm_with_private_statistics(y, users) and _only_relu_readers(y, relu, users):
        return y, None, None
    if not (_is_call(y, "add") and _only_relu_readers(y, relu, users)):
        return None
    a, b = y.inputs
    if a.shape != b.shape or a.dtype != b.dtype or a.shape != relu.shape or a.dtype != relu.dtype:
        return None
    for bn, residual in ((a, b), (b, a)):
        if (bn is not residual and id(bn) not in outputs and _batch_norm_with_private_statistics(bn, users)
                and users.get(id(bn), []) == [y]):
            return bn, y, residual
    return None


def fuse_batch_norm_relu(graph):
    """BN -> ReLU and BN -> add -> ReLU as one call each (see the module docstring)."""
    users, outputs = graph.users(), {id(o) for o in graph.outputs}
    fused, dropped = {}, set()
    for node in graph.nodes:
        if _is_call(node, "relu") and node.dtype is not None:
            found = _match(node, users, outputs)
            if found is not None:
                bn, add, residual = found
                fused[id(node)] = found
                dropped.update({id(bn)} | ({id(add)} if add is not None else set()))
    if not fused:
        return graph
    mapping, nodes, replaced = {}, [], {}
    for node in graph.nodes:
        if id(node) in dropped:
            continue
        inputs = tuple(mapping.get(id(i), i) for i in node.inputs)
        if id(node) in fused:
            bn, add, residual = fused[id(node)]
            new = _fused_call(bn, add, residual, mapping, node)
            for old in (bn, add, node):
                if old is not None:
                    mapping[id(old)] = new
            replaced[id(bn)] = new
        else:  # a ReLU gradient reading y or s reads the fused call: mapping[y] and mapping[s] are it
            new = node if all(a is b for a, b in zip(inputs, node.inputs)) else node.with_inputs(inputs)
        mapping[id(node)] = new
        nodes.append(new)
    remap = lambda n: mapping.get(id(n), n)  # noqa: E731
    effects = [replaced.get(id(e), e) for e in graph.effects]
    return Graph(graph.name, nodes, [remap(i) for i in graph.inputs], [remap(o) for o in graph.outputs], effects)


def _fused_call(bn, add, residual, mapping, relu):
    remap = lambda n: mapping.get(id(n), n)  # noqa: E731
    inputs = [remap(i) for i in bn.inputs]
    name = "batch_norm_relu_train"
    if add is not None:
        inputs.append(remap(residual))
        name = "batch_norm_add_relu_train"
    return Node("call", inputs, get_primitive(name), dict(bn.attrs), shape=relu.shape, dtype=relu.dtype)
