"""W8 t5-tiny: training target tokens/s, loss and copy accuracy of the T5 on W8's copy task, as a user runs it.

    PYTHONPATH=. python benchmarks/t5_tiny.py [--steps 200] [--sink-size 50] [--modes loop_sink,eager] [--peer]

Runs `mstrain --config t5_copy` at W8's shape and task (d_model 256, 4+4 layers, 4 heads, d_ff 1024,
vocab 512, 32 relative buckets up to 128; sources of 128 uniform ids in [2, 512), target = the first
64 ids; batch 16, a fresh batch per step; AdamW lr 3e-4, weight decay 0, constant rate: the peer's
recipe) and reads its history.json. Modes: `loop_sink` (sink_size steps per compiled sink) and
`eager`. Speed: median target tokens/s over the sinks after the first (which includes the one-off
compilation). Quality: greedy copy accuracy over 256 unseen sequences after the run, with the last
step's training loss beside it (on this task the peer too is near chance after a few hundred steps:
the quality figure is reported side by side, not asserted).
`--peer` then runs ../shared/peers/t5_tiny_torch.py with the same steps and prints one ratio line per mode.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mstrain  # noqa: E402,F401  (first: its BLAS thread settings must be set before numpy loads OpenBLAS)
import numpy as np  # noqa: E402

from _common import REPO, emit, fail, ratio, record, run_peer  # noqa: E402

W8 = ["model.vocab_size=512", "model.hidden_size=256", "model.num_layers=4", "model.num_heads=4",
      "model.ffn_hidden_size=1024", "model.relative_buckets=32", "model.relative_max_distance=128",
      "data.length=128", "data.target_length=64", "data.eval_sequences=256", "train.batch_size=16",
      "optimizer.name=adamw", "optimizer.lr=0.0003", "optimizer.weight_decay=0.0", "optimizer.warmup_steps=0",
      "optimizer.schedule=constant"]
MODES = {"loop_sink": "true", "eager": "false"}


def run_ours(steps, sink_size, sink, out_dir):
    cmd = [sys.executable, "-m", "mstrain.cli", "--config", "t5_copy", *W8, f"train.steps={steps}",
           f"train.log_every={sink_size}", f"train.dataset_sink_mode={sink}", f"train.output_dir={out_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads((Path(out_dir) / "history.json").read_text())


def measure(mode, steps, sink_size):
    with tempfile.TemporaryDirectory() as out_dir:
        history = run_ours(steps, sink_size, MODES[mode], out_dir)
    records = history["records"]
    steady = [r["target_tokens_per_s"] for r in records[1:]] or [records[0]["target_tokens_per_s"]]
    return record("W8", "t5-tiny", mode, "train_target_tokens_per_s", float(np.median(steady)),
                  f"copy_acc_after_{steps}_steps", history["copy_acc"], steps=steps, sink_size=sink_size,
                  final_train_loss=round(history["step_loss"][-1], 6),
                  first_sink_tokens_per_s=records[0]["target_tokens_per_s"], chance_acc=round(1 / 510, 6))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sink-size", type=int, default=50, help="steps per sink and per speed sample")
    parser.add_argument("--modes", default="loop_sink", help="comma-separated: " + ", ".join(MODES))
    parser.add_argument("--peer", action="store_true")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        fail(f"--modes: {','.join(unknown) or 'none given'}; choose among {', '.join(MODES)}")
    if args.steps < 1 or args.sink_size < 1 or args.steps % args.sink_size:
        fail(f"--sink-size ({args.sink_size}) must divide --steps ({args.steps})")
    results = [measure(mode, args.steps, args.sink_size) for mode in modes]
    for line in results:
        emit(line)
    if args.peer:
        peer = run_peer("t5_tiny_torch.py", ["--steps", str(args.steps)])[0]
        for ours in results:
            emit(ratio(ours, peer, loss_mstrain=ours["final_train_loss"], loss_peer=peer["final_train_loss"],
                       copy_acc_mstrain=ours["quality"], copy_acc_peer=peer["quality"]))


if __name__ == "__main__":
    main()
