"""Rules live on their primitives: a rule naming no primitive fails where it is registered, and a
new op's rules, registered in one place, reach the passes, the executor and the planner."""
import numpy as np
import pytest

import mstrain as ms
from mstrain.graph import Executable, Tracer, tracing
from mstrain.graph.passes import algebraic_simplification, dead_code_elimination
from mstrain.ops import primitive
from mstrain.parallel.spmd.rules import spec_for


def test_a_rule_for_an_unknown_primitive_fails_when_registered():
    with pytest.raises(LookupError, match="no primitive named 'no_such_op'"):
        primitive.register_rule("lowering", "add", "no_such_op")
    with pytest.raises(ValueError, match="unknown rule kind 'jvp'"):
        primitive.register_rule("jvp", "add")
    assert primitive.get("add").lowering is not None  # a failed registration attaches nothing new


@pytest.fixture
def twice():
    """A new op registered with its rules in one place (as a kit would), removed afterwards."""
    prim = primitive.defop("test_rules_twice", kind="elementwise", cpp="({0} * 2)")(lambda x: x * 2)
    prim.defvjp(lambda ctx, g: (g * 2,))
    prim.defsimplify(lambda node: node.inputs[0].inputs[0] if (
        node.inputs[0].op == "call" and node.inputs[0].prim.name == "test_rules_half") else None)
    half = primitive.defop("test_rules_half", kind="elementwise")(lambda x: x / 2)
    prim.deflowering(lambda node, ins, out: lambda: np.multiply(ins[0], 2, out=out))
    yield prim
    del primitive.REGISTRY["test_rules_twice"], primitive.REGISTRY["test_rules_half"]
    assert half is not None


def test_a_new_ops_rules_reach_passes_executor_and_planner(twice):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    tracer = Tracer("g")
    node = tracer.add_input(ms.Tensor(x))
    with tracing(tracer):
        out = primitive.apply(twice, primitive.apply(primitive.get("test_rules_half"), node))
        graph = tracer.finish([tracer.output_node(out)])
    simple = dead_code_elimination(algebraic_simplification(graph))
    assert simple.count(op="call") == 0  # twice(half(x)) -> x by the op's own rule
    lone = Tracer("h")
    node = lone.add_input(ms.Tensor(x))
    with tracing(lone):
        graph = lone.finish([lone.output_node(primitive.apply(twice, node))])
    executable = Executable(graph)
    np.testing.assert_array_equal(executable.run([x])[0], x * 2)
    assert executable.copied_bytes == 0  # its out= kernel wrote into the planned buffer
    spec = spec_for(twice, [(4, 6)], {})  # an elementwise op shares the elementwise shard rule
    assert spec.in_dims == ((0, 1),) and spec.out_dims == ((0, 1),)
