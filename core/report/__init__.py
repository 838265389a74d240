"""Run reports: `mstrain report RUN_DIR` writes one self-contained HTML page of a run.

    from mstrain.report import build_report, capture_graph, repeated_subgraphs
    graph = capture_graph(net, x)              # ops with their Cell scopes
    repeated_subgraphs(graph)                  # [{'instances': ['blocks.0', ...], 'node_count', 'hash'}]
    build_report("outputs/mlp_mnist")          # -> outputs/mlp_mnist/report.html
"""
import argparse
import sys

from .graph import capture_graph, cell_tree, repeated_subgraphs
from .html import build_comparison, build_report, load_run

__all__ = ["build_report", "build_comparison", "load_run", "capture_graph", "repeated_subgraphs", "cell_tree", "GraphCapture", "main"]


def _graph_capture_class():
    from ..train.callback import Callback

    class GraphCapture(Callback):
        """After the first training step, capture the forward graph on that step's batch and write
        graph.json and repeated_subgraphs.json into `run_dir` (the report's graph view), and the
        graph as a GraphDef into the run's summaries when `summary` (its SummaryCollector) is given."""

        def __init__(self, run_dir, summary=None):
            self.run_dir, self.summary = run_dir, summary
            self.done = False

        def on_train_step_end(self, run_context):
            if self.done:
                return
            self.done = True
            args = run_context.original_args()
            if args.network is None or args.last_batch is None:
                return
            batch = list(args.last_batch)
            # without a loss function the network is a loss network: it takes the labels too
            inputs = batch if getattr(args, "loss_fn", None) is None else batch[:-1]
            graph = write_graph(self.run_dir, args.network, *inputs)
            if self.summary is not None and self.summary.summary_record is not None:
                from ..summary.record import graph_def
                self.summary.summary_record.add_value("graph", "", graph_def(graph))
                self.summary.summary_record.record(args.cur_step_num)
    return GraphCapture


def GraphCapture(run_dir, summary=None):  # noqa: N802 (a class made on first use: mstrain.train imports late)
    return _graph_capture_class()(run_dir, summary)


def write_graph(run_dir, network, *inputs):
    """Capture `network` on `inputs` and write graph.json and repeated_subgraphs.json into run_dir."""
    import os
    from ..fileio import write_json_atomically
    graph = capture_graph(network, *inputs)
    os.makedirs(run_dir, exist_ok=True)
    write_json_atomically(os.path.join(run_dir, "graph.json"), graph)
    write_json_atomically(os.path.join(run_dir, "repeated_subgraphs.json"), repeated_subgraphs(graph))
    return graph


def main(argv=None):
    """`mstrain report RUN_DIR [-o FILE]`; with several run directories, the runs side by side."""
    from ..errors import EXIT_USER_ERROR, UserError
    parser = argparse.ArgumentParser(prog="mstrain report", description="one HTML page of a run directory")
    parser.add_argument("run_dirs", nargs="+", help="run directories (train.output_dir/<job> of runs with "
                                                    "profile=true or summary_freq=N)")
    parser.add_argument("-o", "--output", help="the page to write (default RUN_DIR/report.html; for several "
                                               "runs runs_report.html in the current directory)")
    args = parser.parse_args(argv)
    try:
        if len(args.run_dirs) == 1:
            path = build_report(args.run_dirs[0], args.output)
        else:
            path = build_comparison(args.run_dirs, args.output or "runs_report.html")
    except UserError as exc:
        print(f"mstrain report: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(path)
    return 0
