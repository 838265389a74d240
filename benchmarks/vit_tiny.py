"""W7 vit-tiny: training images/s and test accuracy of the ViT on the shipped MNIST, as a user runs it.

    PYTHONPATH=. python benchmarks/vit_tiny.py [--epochs 2 | --full] [--modes loop_sink,eager] [--seeds 0,1,2] [--peer]

Runs `mstrain --config vit_mnist` (W7 shape: patch 4, width 128, depth 4, 4 heads, MLP 256; batch 64,
AdamW lr 1e-3 with PyTorch's defaults; the first 8000 images train in the peer's batch order, the last
2000 test) for --epochs epochs (125 steps each; 2 by default, `--full` is the 10-epoch recipe of
1250 steps) and reads its history.json. Modes: `loop_sink` (each epoch one compiled sink, the job's
default) and `eager` (step by step). Speed: median images/s over the epochs after the first (which
includes the one-off compilation). Quality: test accuracy after the run.
`--peer` then runs ../shared/peers/vit_tiny_torch.py with the same number of steps (it reuses its
125 batches each epoch, as the job does) and prints one ratio line per mode.
`--seeds 0,1,2` repeats everything per seed (the initial draw and the batch order, both sides) and adds
a summary line per mode with each side's mean test accuracy and its spread: one run's accuracy after 10
epochs moves by 1-2 points with roundoff alone (a learning rate of 1.0001e-3 instead of 1e-3 took one
build from 0.921 to 0.899), so the accuracy goal is judged on means over seeds.
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

from _common import REPO, emit, fail, parse_seeds, ratio, record, run_peer, seed_summary  # noqa: E402

BATCH, TRAIN_IMAGES, FULL_EPOCHS = 64, 8000, 10
STEPS_PER_EPOCH = TRAIN_IMAGES // BATCH
MODES = {"loop_sink": "true", "eager": "false"}


def run_ours(epochs, sink, out_dir, seed):
    cmd = [sys.executable, "-m", "mstrain.cli", "--config", "vit_mnist", f"train.epochs={epochs}", f"train.seed={seed}",
           f"train.eval_every={epochs}", f"train.dataset_sink_mode={sink}", f"train.output_dir={out_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads((Path(out_dir) / "history.json").read_text())


def measure(mode, epochs, seed):
    with tempfile.TemporaryDirectory() as out_dir:
        history = run_ours(epochs, MODES[mode], out_dir, seed)
    records = history["records"]
    steady = [r["images_per_s"] for r in records[1:]] or [records[0]["images_per_s"]]
    return record("W7", "vit-tiny", mode, "train_images_per_s", float(np.median(steady)),
                  f"test_acc_after_{epochs}_epochs", records[-1]["val_acc"], epochs=epochs,
                  steps=epochs * STEPS_PER_EPOCH, final_train_loss=round(history["step_loss"][-1], 6),
                  first_epoch_images_per_s=records[0]["images_per_s"], seed=seed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2, help="epochs of 125 steps (default 2)")
    parser.add_argument("--full", action="store_true", help=f"the {FULL_EPOCHS}-epoch recipe (1250 steps)")
    parser.add_argument("--modes", default="loop_sink", help="comma-separated: " + ", ".join(MODES))
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, one run of each side per seed")
    parser.add_argument("--peer", action="store_true")
    args = parser.parse_args()
    epochs = FULL_EPOCHS if args.full else args.epochs
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        fail(f"--modes: {','.join(unknown) or 'none given'}; choose among {', '.join(MODES)}")
    if epochs < 1:
        fail(f"--epochs must be at least 1, got {epochs}")
    seeds = parse_seeds(args.seeds)
    runs = [one_seed(modes, epochs, seed, args.peer) for seed in seeds]
    if len(seeds) > 1:
        for mode in modes:
            per_seed = [(ours[mode], peer) for ours, peer in runs]
            emit(seed_summary("W7", "vit-tiny", mode, per_seed, "test_acc", args.seeds))


def one_seed(modes, epochs, seed, with_peer):
    """({mode: our JSON line}, the peer's line or None) of one seed, all printed."""
    results = {mode: measure(mode, epochs, seed) for mode in modes}
    for line in results.values():
        emit(line)
    peer = None
    if with_peer:
        peer = run_peer("vit_tiny_torch.py", ["--steps", str(epochs * STEPS_PER_EPOCH), "--seed", str(seed)])[0]
        for ours in results.values():
            emit(ratio(ours, peer, test_acc_mstrain=ours["quality"], test_acc_peer=peer["quality"],
                       test_acc_diff=round(ours["quality"] - peer["quality"], 4), seed=seed))
    return results, peer


if __name__ == "__main__":
    main()
