"""W3a gcn-cora: ms per full-batch training epoch of a 2-layer GCN on Cora, and its test accuracy.

    PYTHONPATH=. python benchmarks/gcn_cora.py [--seeds 10] [--peer]

The experiment of BENCHMARKS.md W3a and of ../shared/peers/gcn_cora_*.py: hidden 16, ReLU, dropout
0.5 (sparse on the input features), A_hat = D^-1/2 (A + I) D^-1/2, Glorot weights, no bias, Adam
lr 0.01 with L2 5e-4 on the first layer, Kipf's early stopping (window 10 on the validation cost).
Speed: median wall time of the training steps (forward + backward + Adam) of every seed, the first
5 steps of the first seed being warm-up, as the peers time it. Quality: test accuracy at the
stopping epoch, mean (and std) over the seeds.

One JSON line per implementation (and per mixed-precision level of --amp, e.g. `--amp O0,O2`:
O2 computes the network in float16 with float32 master weights and a dynamic loss scale, followed
by an `O2 / O0` line with the speed ratio and the accuracy difference); with --peer the PyG and plain-PyTorch peers run right after in
the peer Python (see benchmarks/_common.py: MSTRAIN_PEER_PYTHON, else a .venv in the peers' directory) and a
ratio line follows each (speed_ratio = mstrain ms / peer ms: below 1 is faster).
"""
import argparse
import os
import statistics
import sys
from pathlib import Path

# Our side runs with mstrain's own thread defaults, as a user's `mstrain` job does (this script once
# pinned OpenBLAS to one thread, when its idle workers spun beside the C++ kernels; they sleep at once
# now, mstrain._threads: GCN 1.50-1.51 ms/epoch unpinned against 1.50-1.52 pinned, GAT 6.4-6.7
# against 6.7-7.0, the same accuracies). The peers run with the environment this script was started with.
PEER_ENV = dict(os.environ)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, WARMUP, blas_threads, emit, ratio, record, run_peer  # noqa: E402

WORKLOADS = {"gcn": ("W3a", "gcn-cora"), "gat": ("W3b", "gat-cora")}
GRAPH_KERNELS = ("graph_spmm", "graph_spmm_t", "graph_sddmm", "graph_gat_attention", "graph_gat_attention_backward")
CORE_KERNELS = ("segment_sum",)


def _mstrain_line(model, seeds, first_seed, amp_level="O0"):
    sys.path.insert(0, str(REPO))
    import mstrain.gnn as gnn
    from mstrain import kernels
    from mstrain.gnn.kernels import graph as graph_kernels

    runs = [gnn.train_node_classification(model=model, dataset="cora", root=str(REPO / "data" / "planetoid"),
                                          seed=seed, log_every=0, amp_level=amp_level)
            for seed in range(first_seed, first_seed + seeds)]
    steps = [h["step_ms"] for run in runs for h in run["history"]][WARMUP:]
    accuracies = [run["test_acc"] for run in runs]
    workload, name = WORKLOADS[model]
    mode = "graph_step" if amp_level == "O0" else f"graph_step_amp_{amp_level}"
    return record(workload, name, mode, "ms_per_epoch", statistics.median(steps), "test_acc_mean",
                  statistics.mean(accuracies), test_acc_std=round(statistics.pstdev(accuracies), 6),
                  test_acc_per_seed=[round(a, 4) for a in accuracies], seeds=seeds, seed=first_seed,
                  epochs_mean=statistics.mean(run["epochs"] for run in runs),
                  tested_epoch_mean=statistics.mean(run["tested_epoch"] for run in runs),
                  warmup_steps=WARMUP, timed_steps=len(steps), amp_level=amp_level,
                  skipped_steps=sum(run["skipped_steps"] for run in runs),
                  cpp_kernels=[k for k in GRAPH_KERNELS if graph_kernels.available(k)]
                  + [k for k in CORE_KERNELS if kernels.available(k)],
                  blas_threads=blas_threads(),
                  omp_threads=os.environ.get("OMP_NUM_THREADS", str(os.cpu_count())))


def _run_peers(model, ours, seeds, first_seed):
    """Each peer in the environment this script started with, then its ratio line."""
    os.environ.clear()
    os.environ.update(PEER_ENV)  # our BLAS/OpenMP settings are already applied; the peers get none of them
    for script in (f"{model}_cora_pyg.py", f"{model}_cora_torch.py"):
        try:
            lines = run_peer(script, ["--seeds", str(seeds), "--seed", str(first_seed),
                                      "--data-dir", str(REPO / "data")])
        except RuntimeError as exc:
            emit({"workload": ours["workload"], "name": ours["name"], "peer": script,
                  "error": str(exc).strip().splitlines()[-1]})
            continue
        for peer in lines:
            emit(ratio(ours, peer, peer_impl=peer.get("peer"),
                       quality_diff=round(ours["quality"] - peer["quality"], 6)))


def main(model, argv=None):
    workload, name = WORKLOADS[model]
    parser = argparse.ArgumentParser(description=f"{workload} {name}: ms per training epoch and test accuracy")
    parser.add_argument("--seeds", type=int, default=10, help="models trained, one per seed (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--peer", action="store_true", help="also run the PyG and PyTorch peers and print ratios")
    parser.add_argument("--amp", default="O0",
                        help="mixed-precision levels to measure, comma-separated (O0 and/or O2; default O0)")
    args = parser.parse_args(argv)
    levels = [level.strip() for level in args.amp.split(",") if level.strip()]
    if not levels or any(level not in ("O0", "O2") for level in levels):
        print(f"error: --amp takes O0 and/or O2, got {args.amp!r}", file=sys.stderr)
        return 2
    lines = {}
    for level in levels:
        lines[level] = _mstrain_line(model, args.seeds, args.seed, level)
        emit(lines[level])
    if "O0" in lines and "O2" in lines:
        emit({"workload": workload, "name": name, "ratio_of": "amp O2 / amp O0", "speed_metric": "ms_per_epoch",
              "O2": lines["O2"]["speed"], "O0": lines["O0"]["speed"],
              "speed_ratio": round(lines["O2"]["speed"] / lines["O0"]["speed"], 4),
              "quality_diff": round(lines["O2"]["quality"] - lines["O0"]["quality"], 6)})
    if args.peer:
        _run_peers(model, lines[levels[0]], args.seeds, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main("gcn"))
