"""Model compression: inference images/s of the compressed networks beside their float baselines,
with test accuracy as the quality figure, from the compression jobs themselves.

    python benchmarks/compression.py [--full] [--only qat,slb,scop] [--train-size N]

Modes (one JSON line each):
  lenet-mnist-qat  `float` (LeNet-5, float32) and `int8` (SimulatedQuantizationAwareTraining ->
                   convert: int8 weights, int32 accumulation in the qgemm kernel); extra: model bytes
  lenet-mnist-slb  `slb_w4a8` (SLB 4-bit weights, 8-bit activations) beside its own `float` run
  resnet8-mnist-scop `unpruned` and `pruned` (SCOP, BatchNorm folded in both); extra: params, MACs
Inference runs eagerly on the 2000 test images in batches of 500, median of 3 passes. By default
the jobs train briefly (float 2 epochs, compression 1 epoch) so the script finishes in minutes;
`--full` uses the configs as shipped (the accuracy figures of the closing report).
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

SHORT = {"qat": ["train.epochs=2", "compression.epochs=1"],
         "slb": ["train.epochs=2", "compression.epochs=1"],
         "scop": ["train.epochs=1", "compression.kf_epochs=1", "compression.finetune_epochs=1"]}
CONFIGS = {"qat": "lenet_mnist_qat", "slb": "lenet_mnist_slb", "scop": "resnet8_mnist_scop"}


def run_job(which, full, train_size):
    from mstrain.config import load_job_config
    overrides = ([] if full else SHORT[which]) + ["report.save_path=null"] * (which != "scop")
    overrides += [f"data.train_size={train_size}"] if train_size else []
    loaded = load_job_config(str(_common.REPO / "configs" / f"{CONFIGS[which]}.yaml"), overrides)
    return loaded.job.run(loaded.cfg), loaded.cfg


def lines_for(which, result, cfg):
    name = CONFIGS[which].replace("_", "-")
    common = dict(batch=cfg.report.speed_batch, train_epochs=cfg.train.epochs, train_size=cfg.data.train_size)
    if which == "qat":
        return [_common.record("compression", name, mode, "inference_images_per_s", row["images_per_s"], "test_acc",
                               row["acc"], model_bytes=row["bytes"], **common)
                for mode, row in (("float", result["float"]), ("int8", result["int8"]))]
    if which == "slb":
        mode = f"slb_w{result['weight_bits']}a{result['act_bits']}"
        return [_common.record("compression", name, m, "inference_images_per_s", row["images_per_s"], "test_acc",
                               row["acc"], model_bytes=row["bytes"], **common)
                for m, row in (("float", result["float"]), (mode, result["slb"]))]
    rows = (("unpruned", result["unpruned"]), ("pruned", result["pruned"]))
    return [_common.record("compression", name, mode, "inference_images_per_s", row["images_per_s"], "test_acc",
                           row["acc"], params=row["params"], macs=row["macs"],
                           channels_pruned_of_prunable=result["channels_pruned_of_prunable"], **common)
            for mode, row in rows]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="train as the shipped configs do (slow)")
    parser.add_argument("--only", default="qat,slb,scop", help="comma-separated subset of qat, slb, scop")
    parser.add_argument("--train-size", type=int, default=0, help="training images (default: the config's 8000)")
    args = parser.parse_args()
    chosen = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = set(chosen) - set(CONFIGS)
    if unknown:
        _common.fail(f"--only: unknown {sorted(unknown)}; choose from {sorted(CONFIGS)}")
    for which in chosen:
        result, cfg = run_job(which, args.full, args.train_size)
        lines = lines_for(which, result, cfg)
        for line in lines:
            _common.emit(line)
        base, small = lines
        _common.emit({"workload": "compression", "name": base["name"], "ratio_of": f"{small['mode']} / {base['mode']}",
                      "speed_metric": base["speed_metric"], "speed_ratio": round(small["speed"] / base["speed"], 4),
                      "accuracy_diff": round(small["quality"] - base["quality"], 4)})


if __name__ == "__main__":
    main()
