"""Model compression: inference images/s of the compressed networks beside their float baselines,
with test accuracy as the quality figure, from the compression jobs themselves.

    python benchmarks/compression.py [--full] [--only qat,slb,scop] [--train-size N] [--slb-bits 1,2,4]

Modes (one JSON line each):
  lenet-mnist-qat  `float` (LeNet-5, float32) and `int8` (SimulatedQuantizationAwareTraining ->
                   convert: int8 weights, int32 accumulation in the qgemm kernel); extra: model bytes
  lenet-mnist-slb  `float` and `slb_w1a8`, `slb_w2a8`, `slb_w4a8` (SLB 1/2/4-bit weights, 8-bit
                   activations, each searched from the one float network); extra: model bytes,
                   compression (float bytes / low-bit bytes), accuracy_diff (vs float)
  resnet8-mnist-scop `unpruned` (trained as long as SCOP's three phases) and `pruned` (SCOP:
                   residual-coupled channel groups pruned, BatchNorm folded in both); extra:
                   params, FLOPs, MACs, conv output channels, fraction of channels pruned
Inference runs eagerly on the 2000 test images in batches of 500, median of 3 passes (SCOP's two
networks timed in alternation). By default the jobs train briefly (LeNet-5: float 2 epochs,
compression 1; ResNet-8: float, knockoff and fine-tuning 1 epoch each, too short for SCOP's
accuracy) so the script finishes in minutes; `--full` uses the configs as shipped (the accuracy
figures of the closing report).
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


def load(which, full, train_size):
    from mstrain.config import load_job_config
    overrides = ([] if full else SHORT[which]) + ["report.save_path=null"] * (which != "scop")
    overrides += [f"data.train_size={train_size}"] if train_size else []
    return load_job_config(str(_common.REPO / "configs" / f"{CONFIGS[which]}.yaml"), overrides)


def common_fields(cfg):
    return dict(batch=cfg.report.speed_batch, train_epochs=cfg.train.epochs, train_size=cfg.data.train_size)


def qat_lines(full, train_size):
    loaded = load("qat", full, train_size)
    result, cfg = loaded.job.run(loaded.cfg), loaded.cfg
    return [_common.record("compression", "lenet-mnist-qat", mode, "inference_images_per_s", row["images_per_s"],
                           "test_acc", row["acc"], model_bytes=row["bytes"], **common_fields(cfg))
            for mode, row in (("float", result["float"]), ("int8", result["int8"]))]


def slb_lines(full, train_size, bits):
    """One float LeNet-5, then an SLB search per weight bit width from it."""
    from mstrain.context import PYNATIVE_MODE, set_context
    from mstrain.jobs.compression_jobs import accuracy, float_bytes, images_per_second, slb_search, train_float
    from mstrain.jobs.lenet_mnist import LeNet5
    cfg = load("slb", full, train_size).cfg
    float_net = LeNet5()
    data = train_float(cfg, float_net, "lenet_mnist_slb")
    rows = [("float", None, None)]
    for weight_bits in bits:
        rows.append((f"slb_w{weight_bits}a{cfg.compression.act_bits}", weight_bits,
                     slb_search(cfg, float_net, data, weight_bits)[0]))
    set_context(mode=PYNATIVE_MODE)  # measured eagerly, as the searched networks are
    (x_test, y_test), report = data[1], cfg.report
    base = {"acc": accuracy(float_net, x_test, y_test, report.speed_batch), "bytes": float_bytes(float_net),
            "images_per_s": images_per_second(float_net, x_test, report.speed_batch, report.speed_repeats)}
    rows[0] = ("float", 32, base)
    return [_common.record("compression", "lenet-mnist-slb", mode, "inference_images_per_s", row["images_per_s"],
                           "test_acc", row["acc"], model_bytes=row["bytes"], weight_bits=weight_bits,
                           compression=round(base["bytes"] / row["bytes"], 2),
                           accuracy_diff=round(row["acc"] - base["acc"], 4), search_epochs=cfg.compression.epochs,
                           **common_fields(cfg))
            for mode, weight_bits, row in rows]


def scop_lines(full, train_size):
    loaded = load("scop", full, train_size)
    result, cfg = loaded.job.run(loaded.cfg), loaded.cfg
    c = cfg.compression
    return [_common.record("compression", "resnet8-mnist-scop", mode, "inference_images_per_s", row["images_per_s"],
                           "test_acc", row["acc"], params=row["params"], flops=row["flops"], macs=row["macs"],
                           conv_channels=row["conv_channels"], channels_pruned=result["channels_pruned"],
                           prune_rate=c.prune_rate, kf_epochs=c.kf_epochs, finetune_epochs=c.finetune_epochs,
                           epochs_total=result["epochs"]["unpruned_total"], **common_fields(cfg))
            for mode, row in (("unpruned", result["unpruned"]), ("pruned", result["pruned"]))]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="train as the shipped configs do (slow)")
    parser.add_argument("--only", default="qat,slb,scop", help="comma-separated subset of qat, slb, scop")
    parser.add_argument("--train-size", type=int, default=0, help="training images (default: the config's 8000)")
    parser.add_argument("--slb-bits", default="1,2,4", help="comma-separated SLB weight bit widths (1, 2, 4)")
    args = parser.parse_args()
    chosen = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = set(chosen) - set(CONFIGS)
    if unknown:
        _common.fail(f"--only: unknown {sorted(unknown)}; choose from {sorted(CONFIGS)}")
    bits = [int(b) for b in args.slb_bits.split(",") if b.strip()]
    if not bits or set(bits) - {1, 2, 4}:
        _common.fail(f"--slb-bits: {args.slb_bits!r}; choose from 1, 2, 4")
    for which in chosen:
        if which == "slb":
            lines = slb_lines(args.full, args.train_size, bits)
        else:
            lines = qat_lines(args.full, args.train_size) if which == "qat" else scop_lines(args.full, args.train_size)
        for line in lines:
            _common.emit(line)
        base = lines[0]
        for small in lines[1:]:
            _common.emit({"workload": "compression", "name": base["name"],
                          "ratio_of": f"{small['mode']} / {base['mode']}", "speed_metric": base["speed_metric"],
                          "speed_ratio": round(small["speed"] / base["speed"], 4),
                          "accuracy_diff": round(small["quality"] - base["quality"], 4)})


if __name__ == "__main__":
    main()
