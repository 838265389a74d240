"""`export(net, *inputs, file_name, file_format="ONNX")`: a network for inference, as ONNX.

The network is traced once in inference mode (`set_train(False)`) on the example inputs into
the graph IR (`mstrain.graph`), the same graph graph mode compiles, and each primitive call is
written as ONNX nodes through the table `ONNX_RULES` (primitive name -> rule). Parameters become
initializers, constants become initializers of the dtype their consumer computes in, and the
example inputs' shapes become the model's input shapes (the batch axis symbolic with
`dynamic_batch=True`). An op without an ONNX rule raises an error naming the primitive and the
rules that exist. MindSpore's own formats (MINDIR, AIR) are not produced: asking for them names
ONNX as the supported format.

Needs the `onnx` package (optional): `pip install onnx`. onnxruntime is not needed to export.

>>> export(net, ms.Tensor(x), file_name="mlp", file_format="ONNX")   # writes mlp.onnx
"""
import math

import numpy as np

from .. import autograd
from ..errors import UserError
from ..fileio import write_bytes_atomically
from ..graph.ir import live_nodes
from ..graph.trace import Tracer, tracing
from ..tensor import Tensor

__all__ = ["export", "ONNX_RULES", "ExportError"]

OPSET = 18


class ExportError(UserError, ValueError):
    """The network cannot be written in the asked format (an op without a mapping, a bad format)."""


def export(net, *inputs, file_name, file_format="ONNX", input_names=None, output_names=None,
           dynamic_batch=False):
    """Write `net` (a Cell or function of Tensors) as `file_name` (+ '.onnx' when missing).
    Returns the path written."""
    if str(file_format).upper() != "ONNX":
        raise ExportError(f"export: file_format {file_format!r} is not supported; mstrain exports "
                          "file_format='ONNX' (MINDIR and AIR are MindSpore's own runtime formats)")
    try:
        import onnx
    except ImportError:
        raise ImportError("export(file_format='ONNX') needs the onnx package: pip install onnx") from None
    if not inputs:
        raise ExportError("export: give example inputs (Tensors or arrays) to trace the network on")
    graph = _trace(net, inputs)
    model = _OnnxBuilder(onnx, graph, input_names, output_names, dynamic_batch).build()
    path = file_name if str(file_name).endswith(".onnx") else f"{file_name}.onnx"
    write_bytes_atomically(path, model.SerializeToString())
    return path


def _trace(net, inputs):
    was_training = getattr(net, "training", None)
    if was_training is not None:
        net.set_train(False)
    tracer = Tracer("export")
    try:
        with autograd.no_grad(), tracing(tracer):
            traced = [tracer.add_input(x if isinstance(x, Tensor) else Tensor(np.asarray(x))) for x in inputs]
            out = net(*traced)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            graph = tracer.finish([tracer.output_node(o) for o in outs])
    finally:
        if was_training:
            net.set_train(True)
    live = live_nodes(graph)
    graph.nodes = [n for n in graph.nodes if id(n) in live]
    return graph


# ---------------------------------------------------------------------------------------------
# The rule table: primitive name -> rule(builder, node, input_names) -> output name(s)
# ---------------------------------------------------------------------------------------------
ONNX_RULES = {}


def _rule(*names):
    def register(function):
        for name in names:
            ONNX_RULES[name] = function
        return function
    return register


def _simple(onnx_op, **fixed):
    return lambda b, node, ins: b.emit(onnx_op, ins, **fixed)


for _name, _op in {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "neg": "Neg",
                   "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "abs": "Abs", "relu": "Relu",
                   "tanh": "Tanh", "sigmoid": "Sigmoid", "erf": "Erf", "sin": "Sin", "cos": "Cos",
                   "floor": "Floor", "sign": "Sign", "maximum": "Max", "minimum": "Min",
                   "reciprocal": "Reciprocal", "matmul": "MatMul", "softplus": "Softplus",
                   "equal": "Equal", "less": "Less", "greater": "Greater", "less_equal": "LessOrEqual",
                   "greater_equal": "GreaterOrEqual", "logical_and": "And", "logical_or": "Or",
                   "logical_not": "Not", "where": "Where", "round": "Round"}.items():
    ONNX_RULES[_name] = _simple(_op)
for _name in ("identity", "stop_gradient"):
    ONNX_RULES[_name] = _simple("Identity")


@_rule("not_equal")
def _not_equal(b, node, ins):
    return b.emit("Not", [b.emit("Equal", ins)])


@_rule("rsqrt")
def _rsqrt(b, node, ins):
    return b.emit("Reciprocal", [b.emit("Sqrt", ins)])


@_rule("square")
def _square(b, node, ins):
    return b.emit("Mul", [ins[0], ins[0]])


@_rule("silu")
def _silu(b, node, ins):
    return b.emit("Mul", [ins[0], b.emit("Sigmoid", ins)])


@_rule("leaky_relu")
def _leaky_relu(b, node, ins):
    return b.emit("LeakyRelu", ins, alpha=float(node.attrs["alpha"]))


@_rule("elu")
def _elu(b, node, ins):
    return b.emit("Elu", ins, alpha=float(node.attrs["alpha"]))


@_rule("gelu_erf")
def _gelu_erf(b, node, ins):  # 0.5 x (1 + erf(x / sqrt 2))
    x = ins[0]
    inner = b.emit("Erf", [b.emit("Mul", [x, b.scalar(1 / math.sqrt(2), node)])])
    return b.emit("Mul", [b.emit("Mul", [x, b.scalar(0.5, node)]), b.emit("Add", [inner, b.scalar(1.0, node)])])


@_rule("gelu_tanh")
def _gelu_tanh(b, node, ins):  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    x = ins[0]
    cube = b.emit("Mul", [b.emit("Mul", [x, x]), x])
    inner = b.emit("Add", [x, b.emit("Mul", [cube, b.scalar(0.044715, node)])])
    tanh = b.emit("Tanh", [b.emit("Mul", [inner, b.scalar(math.sqrt(2 / math.pi), node)])])
    return b.emit("Mul", [b.emit("Mul", [x, b.scalar(0.5, node)]), b.emit("Add", [tanh, b.scalar(1.0, node)])])


@_rule("softmax", "log_softmax")
def _softmax(b, node, ins):
    return b.emit("Softmax" if node.prim.name == "softmax" else "LogSoftmax", ins, axis=int(node.attrs["axis"]))


@_rule("dense", "dense_no_bias")
def _dense(b, node, ins):  # x @ W.T (+ b), x of any rank
    weight_t = b.emit("Transpose", [ins[1]], perm=[1, 0])
    out = b.emit("MatMul", [ins[0], weight_t])
    return b.emit("Add", [out, ins[2]]) if len(ins) == 3 else out


@_rule("layer_norm")
def _layer_norm(b, node, ins):
    x, gamma, beta = ins
    width = node.inputs[0].shape[-1]
    gamma = gamma or b.constant(np.ones(width, node.dtype))
    beta = beta or b.constant(np.zeros(width, node.dtype))
    return b.emit("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=float(node.attrs["epsilon"]))


@_rule("attention")
def _attention(b, node, ins):
    """The fused attention as its ONNX pieces: MatMul, Mul, Add, (causal) Where, Softmax, MatMul."""
    query, key, value, bias = ins
    bsnd = node.attrs.get("layout", "BNSD") == "BSND"
    if bsnd:  # (B, L, H, W) -> (B, H, L, W)
        query, key, value = (b.emit("Transpose", [x], perm=[0, 2, 1, 3]) for x in (query, key, value))
    t, s = node.inputs[0].shape[1 if bsnd else 2], node.inputs[1].shape[1 if bsnd else 2]
    context = _attention_bnsd(b, node, query, key, value, bias, t, s)
    return b.emit("Transpose", [context], perm=[0, 2, 1, 3]) if bsnd else context


@_rule("attention_qkvpacked")
def _attention_qkvpacked(b, node, ins):
    """(B, T, 3, H, D) -> (3, B, H, T, D), q/k/v gathered from the first axis, attention, back to BSND."""
    qkv, bias = ins
    _, t, _, heads, width = node.inputs[0].shape
    heads_first = b.emit("Transpose", [qkv], perm=[2, 0, 3, 1, 4])
    shape = b.constant(np.asarray([-1, heads, t, width], np.int64))  # (1, B, H, T, D) -> (B, H, T, D)
    query, key, value = (b.emit("Reshape", [b.emit("Gather", [heads_first, b.constant(np.asarray([i], np.int64))],
                                                   axis=0), shape]) for i in range(3))
    context = _attention_bnsd(b, node, query, key, value, bias, t, t)
    return b.emit("Transpose", [context], perm=[0, 2, 1, 3])


def _attention_bnsd(b, node, query, key, value, bias, t, s):
    scores = b.emit("MatMul", [query, b.emit("Transpose", [key], perm=[0, 1, 3, 2])])
    scores = b.emit("Mul", [scores, b.scalar(float(node.attrs["scale"]), node)])
    if bias:
        scores = b.emit("Add", [scores, bias])
    if node.attrs.get("causal"):
        visible = np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)
        scores = b.emit("Where", [b.constant(visible), scores, b.scalar(-1e9, node)])
    return b.emit("MatMul", [b.emit("Softmax", [scores], axis=-1), value])


@_rule("reshape_to")
def _reshape(b, node, ins):
    return b.emit("Reshape", [ins[0], b.constant(np.asarray(node.shape, np.int64))])


@_rule("broadcast_to")
def _broadcast_to(b, node, ins):
    return b.emit("Expand", [ins[0], b.constant(np.asarray(node.shape, np.int64))])


@_rule("transpose")
def _transpose(b, node, ins):
    axes = node.attrs["axes"]
    perm = list(range(len(node.shape)))[::-1] if axes is None else [int(a) % len(node.shape) for a in axes]
    return b.emit("Transpose", ins, perm=perm)


@_rule("swapaxes")
def _swapaxes(b, node, ins):
    rank = len(node.shape)
    perm = list(range(rank))
    a, c = node.attrs["axis1"] % rank, node.attrs["axis2"] % rank
    perm[a], perm[c] = perm[c], perm[a]
    return b.emit("Transpose", ins, perm=perm)


@_rule("gather")
def _gather(b, node, ins):
    return b.emit("Gather", ins, axis=int(node.attrs.get("axis", 0)))


@_rule("concat")
def _concat(b, node, ins):
    return b.emit("Concat", ins, axis=int(node.attrs["axis"]))


@_rule("cast")
def _cast(b, node, ins):
    return b.emit("Cast", ins, to=b.onnx_type(node.dtype))


@_rule("sum", "mean", "max", "min", "prod")
def _reduce(b, node, ins):
    onnx_op = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin",
               "prod": "ReduceProd"}[node.prim.name]
    axis = node.attrs.get("axis")
    rank = len(node.inputs[0].shape)
    axes = list(range(rank)) if axis is None else [int(a) % rank for a in np.atleast_1d(axis)]
    return b.emit(onnx_op, [ins[0], b.constant(np.asarray(axes, np.int64))],
                  keepdims=int(bool(node.attrs.get("keepdims", False))))


@_rule("getitem")
def _getitem(b, node, ins):
    """Basic indexing (ints, slices with a step, None, Ellipsis) as Slice, Squeeze and Unsqueeze."""
    index = node.attrs["index"]
    index = index if isinstance(index, tuple) else (index,)
    rank = len(node.inputs[0].shape)
    if any(not isinstance(i, (int, np.integer, slice, type(None), type(Ellipsis))) for i in index):
        raise ExportError(f"export: getitem with an index array ({node.inputs[0].type_str()}) has no ONNX "
                          "mapping; use ops.gather")
    explicit = sum(1 for i in index if i is not None and i is not Ellipsis)
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (rank - explicit) + index[at + 1:]
    index = index + (slice(None),) * (rank - sum(1 for i in index if i is not None))
    starts, ends, axes, steps, squeeze, unsqueeze, axis, out_axis = [], [], [], [], [], [], 0, 0
    for item in index:
        if item is None:
            unsqueeze.append(out_axis)
            out_axis += 1
            continue
        size = node.inputs[0].shape[axis]
        if isinstance(item, slice):
            start, stop, step = item.indices(size)
            if (start, stop, step) != (0, size, 1):
                starts.append(start)
                ends.append(stop if stop >= 0 else -size - 1)
                axes.append(axis)
                steps.append(step)
            out_axis += 1
        else:
            position = int(item) % size
            starts.append(position)
            ends.append(position + 1)
            axes.append(axis)
            steps.append(1)
            squeeze.append(axis)
        axis += 1
    out = ins[0]
    if axes:
        out = b.emit("Slice", [out] + [b.constant(np.asarray(v, np.int64)) for v in (starts, ends, axes, steps)])
    if squeeze:
        out = b.emit("Squeeze", [out, b.constant(np.asarray(squeeze, np.int64))])
    if unsqueeze:
        out = b.emit("Unsqueeze", [out, b.constant(np.asarray(unsqueeze, np.int64))])
    return out


# ---------------------------------------------------------------------------------------------
class _OnnxBuilder:
    """Walks the traced graph in order and emits ONNX nodes, initializers and value infos."""

    def __init__(self, onnx, graph, input_names, output_names, dynamic_batch):
        self.onnx, self.helper = onnx, onnx.helper
        self.graph = graph
        self.input_names = list(input_names or [f"input_{k}" for k in range(len(graph.inputs))])
        self.output_names = list(output_names or [f"output_{k}" for k in range(len(graph.outputs))])
        if len(self.input_names) != len(graph.inputs) or len(self.output_names) != len(graph.outputs):
            raise ExportError(f"export: {len(self.input_names)} input names for {len(graph.inputs)} inputs, "
                              f"{len(self.output_names)} output names for {len(graph.outputs)} outputs")
        self.dynamic_batch = dynamic_batch
        self.nodes, self.initializers, self.names, self._counter = [], [], {}, 0

    def fresh(self, hint):
        self._counter += 1
        return f"{hint}_{self._counter}"

    def onnx_type(self, dtype):
        return self.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    def emit(self, op_type, inputs, **attrs):
        output = self.fresh(op_type.lower())
        self.nodes.append(self.helper.make_node(op_type, [name or "" for name in inputs], [output], **attrs))
        return output

    def constant(self, array, hint="const"):
        name = self.fresh(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def scalar(self, value, node):
        return self.constant(np.asarray(value, dtype=node.dtype or np.float32))

    def _const_input(self, const, consumer):
        """A constant in the dtype its consumer computes in (Python scalars adopt the tensor's dtype)."""
        value = const.value
        if value is None:
            return None
        tensor_dtypes = [i.dtype for i in consumer.inputs if i.op != "const" and i.dtype is not None]
        if isinstance(value, np.ndarray):
            # a float constant beside a float tensor computed in the tensor's dtype (weak scalar)
            if tensor_dtypes and value.dtype.kind == "f" and tensor_dtypes[0].kind == "f" and value.ndim == 0:
                value = value.astype(tensor_dtypes[0])
            return self.constant(value)
        # a Python scalar takes the dtype the op computes in: its output's, unless that is a
        # comparison's bool, then its tensor operand's (where(mask, ids, 0) -> ids' int dtype)
        candidates = [consumer.dtype] + tensor_dtypes
        dtype = next((d for d in candidates if d is not None and d != np.bool_), np.float32)
        return self.constant(np.asarray(value, dtype=dtype))

    def _value_info(self, name, node, is_input):
        shape = list(node.shape)
        if self.dynamic_batch and shape:
            shape[0] = "batch"
        return self.helper.make_tensor_value_info(name, self.onnx_type(node.dtype), shape)

    def build(self):
        for k, node in enumerate(self.graph.inputs):
            self.names[id(node)] = self.input_names[k]
        for node in self.graph.nodes:
            if node.op == "resident":
                name = getattr(node.value, "name", None) or self.fresh("param")
                self.initializers.append(self.onnx.numpy_helper.from_array(
                    np.ascontiguousarray(node.value.asnumpy()), name))
                self.names[id(node)] = name
            elif node.op == "call":
                self.names[id(node)] = self._call(node)
            elif node.op == "project":
                raise ExportError(f"export: {node.inputs[0].prim.name} has several outputs and no ONNX mapping")
        outputs = []
        for name, node in zip(self.output_names, self.graph.outputs):
            self.nodes.append(self.helper.make_node("Identity", [self.names[id(node)]], [name]))
            outputs.append(self._value_info(name, node, False))
        inputs = [self._value_info(self.names[id(n)], n, True) for n in self.graph.inputs]
        graph = self.helper.make_graph(self.nodes, "mstrain", inputs, outputs, self.initializers)
        model = self.helper.make_model(graph, opset_imports=[self.helper.make_opsetid("", OPSET)],
                                       producer_name="mstrain")
        self.onnx.checker.check_model(model)
        return model

    def _call(self, node):
        rule = ONNX_RULES.get(node.prim.name)
        if rule is None:
            raise ExportError(f"export: the op '{node.prim.name}' has no ONNX mapping (mapped: "
                              f"{', '.join(sorted(ONNX_RULES))})")
        ins = [self._const_input(i, node) if i.op == "const" else self.names[id(i)] for i in node.inputs]
        return rule(self, node, ins)
