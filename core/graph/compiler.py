"""The compiler: a traced graph through a short list of named passes to a bound executable.

    traced graph
      -> dce, fold, simplify, cse, dce        (always)
      -> expand, cse, bn_relu, fuse           (graph kernel fusion: enable_graph_kernel and a compiler)
      -> Executable (memory plan + numpy / generated C++ kernels)

With MSTRAIN_DUMP_IR=<dir> (or set_context(save_graphs=True)) every graph is written as text
before the passes and after each one: <dir>/<graph name>.<n>/<k>_<pass>.ir.
"""
import itertools
import os
import re

from ..context_state import get_context
from .passes import (algebraic_simplification, common_subexpression_elimination, constant_folding,
                     dead_code_elimination, move_elementwise_to_readers)

PASSES = [
    ("dce", dead_code_elimination),                 # drop what no output or side effect needs
    ("fold", constant_folding),                     # evaluate calls whose inputs are all constants
    ("simplify", algebraic_simplification),         # x*1, x+0, -(-x), no-op casts and reshapes
    ("cse", common_subexpression_elimination),      # one node per distinct pure computation
    ("dce", dead_code_elimination),                 # what simplification and merging left unused
]


def _kernel_passes():
    from .conv_fusion import fuse_batch_norm_relu
    from .epilogue import fuse_gemm_epilogues
    from .fusion import expand_composites, fuse_kernels
    from .half import fold_operand_casts, recompute_widened_halves
    from .half_bias import fold_bias_widen
    from .half_checks import fold_overflow_checks
    from .half_feed import round_inputs_on_feed
    from .half_shadow import shadow_half_weights, share_widened_operands
    return [
        ("expand", expand_composites),              # softmax, layer norm, losses, masks, updates -> basic ops
        ("dce", dead_code_elimination),             # the composites the expansions replaced
        ("fold", constant_folding),                 # constants the expansions introduced
        ("simplify", algebraic_simplification),     # e.g. casts of a learning rate to its own dtype
        ("cse", common_subexpression_elimination),  # expansions share their subexpressions
        ("half_operands", fold_operand_casts),      # float16 products read float32 operands, rounding them
        ("half_widen", share_widened_operands),     # an operand several products read: widened once
        ("half_recompute", recompute_widened_halves),  # unscaled float16 gradients: in each reader's kernel
        ("half_shadows", shadow_half_weights),      # products read master weights rounded by their update
        ("half_checks", fold_overflow_checks),      # overflow checks: a flag the product sets as it rounds
        ("half_bias", fold_bias_widen),             # a float16 bias add read as float32: one C pass
        ("dce", dead_code_elimination),             # the float16 casts and values nothing reads any more
        ("half_feed", round_inputs_on_feed),        # a batch only widened for products: rounded as it is fed
        ("bn_relu", fuse_batch_norm_relu),          # BN -> (add ->) ReLU: one call writing the ReLU's output
        ("late", move_elementwise_to_readers),      # an elementwise value computed next to its one reader
        ("fuse", fuse_kernels),                     # elementwise / row-reduction groups -> one C++ kernel each
        ("dce", dead_code_elimination),
        ("epilogue", fuse_gemm_epilogues),          # a product and the elementwise kernel reading it: one node
    ]


def fusion_enabled(requested=None):
    """Fusion runs when asked (or enable_graph_kernel), not disabled by MSTRAIN_DISABLE_FUSION, and
    a C++ compiler is available."""
    if os.environ.get("MSTRAIN_DISABLE_FUSION", "").strip().lower() not in ("", "0", "false", "no"):
        return False
    if requested is None:
        requested = get_context("enable_graph_kernel")
    if not requested:
        return False
    from .build import compiler_available
    return compiler_available()


def passes(fusion):
    """The pass list for one compilation."""
    return PASSES + (_kernel_passes() if fusion else [])


_dump_counter = itertools.count()


def _dump_dir():
    path = os.environ.get("MSTRAIN_DUMP_IR")
    if path:
        return path
    return os.path.join(get_context("save_graphs_path"), "ir") if get_context("save_graphs") else None


def run_passes(graph, fusion=None):
    """`graph` after every pass of `passes(fusion)`; dumps each stage when asked to."""
    fusion = fusion_enabled(fusion)
    root = _dump_dir()
    folder = None
    if root:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", graph.name) or "graph"
        folder = os.path.join(root, f"{safe}.{next(_dump_counter)}")
        os.makedirs(folder, exist_ok=True)
        _write(folder, "00_traced.ir", graph)
    for k, (name, run) in enumerate(passes(fusion), 1):
        graph = run(graph)
        if folder:
            _write(folder, f"{k:02d}_{name}.ir", graph)
    return graph


def compile_graph(graph, fusion=None):
    """Optimise `graph` and bind it: returns (optimised graph, Executable)."""
    from .executor import Executable
    graph = run_passes(graph, fusion)
    return graph, Executable(graph)


def _write(folder, name, graph):
    with open(os.path.join(folder, name), "w") as f:
        f.write(str(graph) + "\n")
