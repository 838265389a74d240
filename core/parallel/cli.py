"""`mstrain plan` and `mstrain ckpt`: the parallel layout search and checkpoint resharding, offline.

    mstrain plan --config configs/gpt.yaml -n 64 [--memory-limit-gb 16] [--json]
    mstrain plan --config widedeep_criteo -n 8      (a kit's planner for its job, see below)
    mstrain plan --calibrate [--calibrate-ranks 2] [--profile PATH]   (measure this machine first)
    mstrain ckpt merge --dir CKPT_DIR --output full.ckpt [--strategy CKPT_DIR/strategy.json]
    mstrain ckpt transform --src-dir CKPT_DIR [--src-strategy A] --dst-strategy B --dst-dir OUT_DIR

A kit plans its own jobs by naming a function `plan(cfg, ranks, memory_limit_gb, as_json) -> exit
code` under the job's name in the entry-point group "mstrain.plan" (pyproject.toml); `mstrain plan`
then validates the config against the job's schema and hands it over.
"""
import argparse
import json
import sys
from pathlib import Path

from ..errors import ConfigError, UserError

def main(argv):
    """Entry of the `plan` and `ckpt` verbs; returns the exit code."""
    argv = list(argv)
    if not argv or argv[0] not in ("plan", "ckpt"):
        raise UserError("mstrain.parallel.cli: expected 'plan' or 'ckpt'")
    try:
        return _plan(argv[1:]) if argv[0] == "plan" else _ckpt(argv[1:])
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)


# ---- plan ------------------------------------------------------------------------------------------

def _plan_parser():
    p = argparse.ArgumentParser(prog="mstrain plan", description="Choose the data x model x pipeline layout, "
                                "micro-batches, recompute and operator strategies for a transformer config "
                                "on N ranks, without launching them.")
    p.add_argument("--config", "-c", default=None, help="the job's YAML config (its model: and parallel: sections)")
    p.add_argument("-n", "--ranks", type=int, default=None, help="number of ranks to plan for")
    p.add_argument("--calibrate", action="store_true", help="measure this machine's matrix-product rates, "
                   "memory bandwidth, per-element and per-call costs of the eager engine and all-reduce "
                   "latency/bandwidth, and write the hardware profile later plans use (then plan, if --config "
                   "is given)")
    p.add_argument("--calibrate-ranks", type=int, default=2, help="ranks to measure all-reduce over when "
                   "calibrating from one process (default 2; under mpiexec: the launched ranks)")
    p.add_argument("--profile", default=None, help="the hardware profile to write / read (default: "
                   "$MSTRAIN_CACHE_DIR or ~/.cache/mstrain, file hardware.json)")
    p.add_argument("--global-batch-size", type=int, default=None,
                   help="sequences per step over all ranks (default: train.batch_size x n, i.e. the config's "
                        "per-rank batch under pure data parallelism)")
    p.add_argument("--memory-limit-gb", type=float, default=None, help="per-rank memory limit (default: "
                   "parallel.memory_limit_gb, else 16)")
    p.add_argument("--flops", type=float, default=None, help="sustained FLOP/s of one rank")
    p.add_argument("--bandwidth", type=float, default=None, help="bytes/s of one link in a collective")
    p.add_argument("--latency", type=float, default=None, help="seconds per collective step")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    return p


def _load_yaml(path):
    import yaml
    text = Path(path).read_text()
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML ({exc})", source=str(path)) from None
    if not isinstance(doc, dict):
        raise ConfigError("the top level must be a mapping", source=str(path))
    return doc


def _spec_from_config(doc, path, n, global_batch):
    from .config import model_value, transformer_spec
    model = doc.get("model") or {}
    for key in ("num_layers", "hidden_size", "num_heads", "vocab_size"):
        if model_value(model, key)[0] is None:
            raise ConfigError(f"model.{key} (or a kit spelling of it) is needed to plan a transformer",
                              source=str(path), key=f"model.{key}")
    if global_batch is None:
        per_rank = (doc.get("train") or {}).get("batch_size") or model.get("batch_size") or 1
        global_batch = int(per_rank) * n
    spec = transformer_spec(model, global_batch)
    if spec is None:
        raise ConfigError("model.seq_length (or block_size) is needed to plan a transformer", source=str(path),
                          key="model.seq_length")
    return spec


def _plan(argv):
    from . import calibrate
    from .search import format_plan, plan_json, search
    args = _plan_parser().parse_args(argv)
    if args.calibrate:
        _calibrate(args)
        if args.config is None:
            return 0
    if args.config is None or args.ranks is None:
        raise ConfigError("mstrain plan needs --config FILE and -n RANKS (or --calibrate alone)")
    if args.ranks < 1:
        raise ConfigError(f"-n must be a positive number of ranks, got {args.ranks}")
    from ..config.loader import find_config
    config_path = find_config(args.config)
    doc = _load_yaml(config_path)
    planner = _kit_planner(doc.get("job"))
    if planner is not None:
        from ..config import load_job_config
        return planner(load_job_config(str(config_path), []).cfg, args.ranks, args.memory_limit_gb, args.json) or 0
    spec = _spec_from_config(doc, args.config, args.ranks, args.global_batch_size)
    limit_gb = args.memory_limit_gb
    if limit_gb is None:
        limit_gb = (doc.get("parallel") or {}).get("memory_limit_gb") or 16.0
    profile = calibrate.read_profile(args.profile)
    hw = calibrate.hardware_from_profile(profile, flops=args.flops, bandwidth=args.bandwidth, latency=args.latency,
                                         memory=float(limit_gb) * 2 ** 30)
    source = _profile_source(args.profile, profile)
    best, evaluated, seconds = search(spec, args.ranks, hw)
    if args.json:
        print(json.dumps({**plan_json(best, spec, args.ranks, seconds), "hardware_profile": source}, sort_keys=True))
    else:
        print(format_plan(spec, args.ranks, best, evaluated, seconds, hw.memory))
        print(f"  hardware: {source}")
    return 0


PLAN_ENTRY_POINT_GROUP = "mstrain.plan"


def _kit_planner(job):
    """The planner a kit registered for `job` (entry points of the group "mstrain.plan"), or None."""
    from ..registry import entry_points
    entry_point = entry_points(PLAN_ENTRY_POINT_GROUP).get(job) if job else None
    return entry_point.load() if entry_point is not None else None


def _profile_source(path, profile):
    from .calibrate import profile_path
    if profile is None:
        return "built-in defaults (run `mstrain plan --calibrate` to measure this machine)"
    return f"{path or profile_path()} (calibrated {profile.get('created', '?')} on {profile.get('host', '?')})"


def _calibrate(args):
    from .. import communication as comm
    from . import calibrate
    if args.calibrate_ranks < 1:
        raise ConfigError(f"--calibrate-ranks must be a positive number of ranks, got {args.calibrate_ranks}")
    comm.init()
    profile = calibrate.calibrate(args.calibrate_ranks)
    if comm.get_rank() != 0:
        return
    path = calibrate.write_profile(profile, args.profile)
    print(f"calibrated {profile['host']} ({profile['numpy_threads']} numpy thread(s)), wrote {path}")
    print(calibrate.describe(calibrate.hardware_from_profile(profile)))


# ---- ckpt ------------------------------------------------------------------------------------------

def _ckpt_parser():
    p = argparse.ArgumentParser(prog="mstrain ckpt", description="Merge or reshard distributed checkpoints "
                                "(a directory of rank_<r>.ckpt files and their strategy.json).")
    sub = p.add_subparsers(dest="command", required=True)
    merge = sub.add_parser("merge", help="write one full checkpoint")
    merge.add_argument("--dir", required=True, help="the distributed checkpoint directory")
    merge.add_argument("--output", required=True, help="the full checkpoint to write")
    merge.add_argument("--strategy", default=None, help="strategy file (default: DIR/strategy.json)")
    transform = sub.add_parser("transform", help="reshard for another layout")
    transform.add_argument("--src-dir", required=True, help="the distributed checkpoint directory")
    transform.add_argument("--src-strategy", default=None, help="its strategy file (default: SRC_DIR/strategy.json)")
    transform.add_argument("--dst-strategy", required=True, help="the strategy file of the target layout")
    transform.add_argument("--dst-dir", required=True, help="where to write the resharded rank files")
    return p


def _ckpt(argv):
    from .checkpoint import merge_checkpoints, transform_checkpoints
    args = _ckpt_parser().parse_args(argv)
    if args.command == "merge":
        path = merge_checkpoints(args.dir, args.output, args.strategy)
        print(f"merged {args.dir} into {path}")
    else:
        out = transform_checkpoints(args.src_dir, args.dst_dir, args.dst_strategy, args.src_strategy)
        print(f"resharded {args.src_dir} for {args.dst_strategy} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
