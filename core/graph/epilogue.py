"""GEMM epilogues: a matrix product and the elementwise kernel that reads it, as one node.

After fusion a dense layer is a `matmul` followed by a fused elementwise kernel reading its result
(the bias add and activation, `fused(add,relu)`; in the backward pass `fused(relu_grad)` after the
activation gradient's product). `fuse_gemm_epilogues` merges such a pair into one `fused` node
whose value is a `GemmEpilogue`: the product writes straight into the node's output buffer and the
elementwise kernel then runs in place over it while it is still in cache, so the product's own
buffer (and one pass over memory through it) is gone. In IR dumps the node reads
`fused(matmul, add, relu)`, with the product's line above the kernel's members.

A pair merges when the product is a `matmul` (a float16 one runs as mstrain.graph.half makes it)
whose only reader is that kernel, the kernel is elementwise over
exactly the product's shape, writes no state, and has an output of that shape and dtype (where the
product is written; a bias add kept for the activation's gradient is one). The numbers are the unmerged
graph's: the same product call (BLAS or mstrain.kernels.thin_gemm), then the same generated kernel
on the same values. Where the kernel starts with a dense layer's bias add, the product adds the bias
itself where that keeps those bits (mstrain.graph.gemm_bias) and the kernel runs without the add (a
plain dense layer: no kernel at all); the node still reads `fused(matmul, add, ...)`.
"""
import numpy as np

from . import lowering
from .group import FusedGroup
from .ir import Graph, Node

_PRODUCTS = ("matmul",)


class GemmEpilogue:
    """The value of a merged node: `product` (a matmul call) written into the output of `group`."""

    def __init__(self, name, product, group, product_slot):
        """`product_slot`: the position of the product among the group's inputs."""
        self.name = name
        self.product = product
        self.group = group
        self.product_slot = product_slot
        self.members = [product] + list(group.members)
        self.assigned = []
        self.outputs = list(group.outputs)
        self.shape = group.shape
        self.mode = "gemm_epilogue"
        self.inplace_ok = False  # the product writes the output before the kernel reads its other inputs

    def describe(self, indent):
        lines = [f"{indent}product into the output: {self.product.type_str()} = {self.product.prim.name}"
                 f"(in0, in1), then in place:"]
        return lines + self.group.describe(indent)

    def build(self, ins, outs):
        """A callable running the product into the kernel's first output of its shape and dtype
        (`outs`: the kernel's outputs), then the kernel over it in place."""
        n_product = len(self.product.inputs)
        product_ins, rest = list(ins[:n_product]), list(ins[n_product:])
        out = outs[_output_slot(self.group, self.product.dtype)]
        if not isinstance(out, np.ndarray):
            raise ValueError(f"{self.name}: the product's output buffer is not an array")
        from .executor import _attach_gemm, _half_gemm
        product = _half_gemm(self.product, product_ins, out)  # a float16 product (mstrain.graph.half)
        if product is None:
            product = lowering.out_kernel(self.product, product_ins, out)
            if product is None:
                product = lowering.impl_kernel(self.product, product_ins, [out])
            product = _attach_gemm(product, self.product, product_ins, out)
        group_ins = rest[:self.product_slot] + [out] + rest[self.product_slot:]
        biased = _bias_in_product(self.group, self.product_slot, product, group_ins, outs, out)
        if biased is not None:
            product, kernel = biased
        else:
            kernel = self.group.build(group_ins, list(outs))
        if kernel is None:
            run = lambda: product()  # noqa: E731
        else:
            def run():
                product()
                kernel()
        run.keep = (product, kernel)
        steps = _native_steps(product, kernel)
        if steps is not None:
            run.native = ("steps", steps)
        return run


def _bias_in_product(group, product_slot, product, group_ins, outs, out):
    """(the product adding the bias, the group's kernel without the add or None) when the bias add
    goes into the product (see mstrain.graph.gemm_bias), else None."""
    from . import gemm_bias
    split = gemm_bias.split_bias(group, product_slot, _output_slot(group, out.dtype))
    if split is None:
        return None
    add, bias_node, rest = split
    arrays = {id(node): array for node, array in zip(group.pointer_inputs, group_ins)}
    bias = arrays[id(bias_node)]
    if not isinstance(bias, np.ndarray):
        return None
    biased = gemm_bias.bias_product(product, bias.reshape(bias.shape[-1:]), out)
    if biased is None:
        return None
    if rest is None:
        return biased, None
    arrays[id(add)] = out
    kept = [array for value, array in zip(group.outputs, outs) if value is not add]
    return biased, rest.build([arrays[id(node)] for node in rest.pointer_inputs], kept)


def _native_steps(product, kernel):
    """The C calls of the product then the kernel (if any), or None when one of them has none."""
    from . import native
    if native.runtime() is None:
        return None
    product_native = getattr(product, "native", None)
    if product_native is not None and product_native[0] == "steps":
        steps = list(product_native[1])
    else:
        call = native.c_call(product_native)
        if call is None:
            return None
        steps = [call]
    if kernel is None:
        return steps
    kernel_native = getattr(kernel, "native", None)
    if kernel_native is None or kernel_native[0] != "kernel":
        return None
    return steps + [native.c_call(kernel_native)]


def _output_slot(group, dtype):
    """The first output of `group` a product of its whole shape in `dtype` can be written into."""
    for slot, value in enumerate(group.outputs):
        if tuple(value.shape) == group.shape and value.dtype == dtype:
            return slot
    return None


def _epilogue_product(node, users, outputs):
    """(slot, product) of the product `node` (a fused elementwise kernel) may take in, or None."""
    group = node.value
    if not isinstance(group, FusedGroup) or group.mode != "elementwise" or group.assigned:
        return None
    if len(node.inputs) != len(group.pointer_inputs):
        return None
    for slot, candidate in enumerate(node.inputs):
        if candidate.op != "call" or candidate.prim.name not in _PRODUCTS or candidate.shape is None:
            continue
        if tuple(candidate.shape) != group.shape or candidate.dtype not in (np.float16, np.float32, np.float64):
            continue
        if _output_slot(group, candidate.dtype) is None:
            continue
        if id(candidate) in outputs or {id(u) for u in users[id(candidate)]} != {id(node)}:
            continue
        if sum(i is candidate for i in node.inputs) != 1:
            continue
        return slot, candidate
    return None


def fuse_gemm_epilogues(graph):
    """Merge each product with the elementwise kernel that alone reads it (see the module docstring)."""
    users, outputs = graph.users(), {id(o) for o in graph.outputs}
    merged = {}
    for node in graph.nodes:
        if node.op == "fused":
            product = _epilogue_product(node, users, outputs)
            if product is not None:
                merged[id(node)] = product
    if not merged:
        return graph
    dropped = {id(p) for _, p in merged.values()}
    mapping, nodes = {}, []
    for node in graph.nodes:
        if id(node) in dropped:
            continue
        if id(node) in merged:
            slot, product = merged[id(node)]
            value = GemmEpilogue(f"{node.value.name}_gemm", product, node.value, slot)
            inputs = list(product.inputs) + [i for k, i in enumerate(node.inputs) if k != slot]
            copy = Node("fused", [mapping.get(id(i), i) for i in inputs], value=value,
                        shape=node.shape, dtype=node.dtype)
        else:
            inputs = [mapping.get(id(i), i) for i in node.inputs]
            copy = node if all(a is b for a, b in zip(inputs, node.inputs)) else node.with_inputs(inputs)
        mapping[id(node)] = copy
        nodes.append(copy)
    final = lambda n: mapping.get(id(n), n)  # noqa: E731
    return Graph(graph.name, nodes, [final(i) for i in graph.inputs], [final(o) for o in graph.outputs],
                 [n for n in nodes if n.is_effect])


__all__ = ["GemmEpilogue", "fuse_gemm_epilogues"]
