"""Graph mode: tracing into one IR, passes, kernel fusion with generated C++, and the sinking executor.

    trace (mstrain.graph.trace)  ->  passes (mstrain.graph.compiler.PASSES)  ->  Executable (mstrain.graph.executor)

`mstrain.jit` builds `ms.jit` on top; `mstrain.train.sink.GraphSinkRunner` runs a whole training step
through it `sink_size` times per host round trip for `Model.train(..., dataset_sink_mode=True)`.
"""
from .ir import Graph, Node, format_graph, rewrite
from .trace import Tracer, TracingError, tracing
from .compiler import PASSES, compile_graph, fusion_enabled, run_passes
from .executor import Executable

__all__ = ["Graph", "Node", "format_graph", "rewrite", "Tracer", "TracingError", "tracing", "PASSES",
           "compile_graph", "fusion_enabled", "run_passes", "Executable"]
