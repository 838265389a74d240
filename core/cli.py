"""`mstrain`: run a job from a YAML config, list the configs, or hand a verb to the room that owns it.

    mstrain --config configs/mlp_mnist.yaml [key.sub=value ...]    run a job (hydra overrides)
    mstrain --config configs/mlp_mnist.yaml --help                 the job's keys, values and help
    mstrain list                                                   runnable configs
    mstrain <verb> ...                                             a room's own command (VERBS)

Verbs are a registry: `VERBS` maps a verb to "module:function [leading args]". `mstrain <verb> a b`
imports the module and calls `function([leading args..., "a", "b"])`; the function returns an exit
code (None = 0). A room adds its verb with one line here.

User errors (mstrain.errors.UserError and subclasses, unreadable config files) print one line
`mstrain: error: <message>` on stderr and exit 2. Anything else is a bug: traceback, exit 1.
"""
import importlib
import json
import os
import sys

from .errors import EXIT_USER_ERROR, UserError

__all__ = ["main", "VERBS"]

VERBS = {
    "list": "mstrain.cli:list_main",
    "data": "mstrain.mindrecord.cli:main",
    "plan": "mstrain.parallel.cli:main plan",
    "ckpt": "mstrain.parallel.cli:main ckpt",
    "dump": "mstrain.dump.compare:main",
    "report": "mstrain.report:main",
    "lineage": "mstrain.lineage:main",
}

USAGE = """\
usage: mstrain --config FILE [key=value ...] [--print-config] [--help]
       mstrain list
       mstrain data ...   | plan ... | ckpt ... | dump compare RUN_A RUN_B | report RUN_DIR | lineage RUN_DIR...

Train a model from a YAML config, in the spirit of MindSpore's model zoo.

options:
  -c, --config FILE   the config to run: a path, or a name found in ./configs, the repo's
                      configs/ or MSTRAIN_CONFIG_PATH (e.g. `mlp_mnist`)
  key=value           hydra override: train.epochs=3, optimizer.betas=[0.9,0.95],
                      +new.key=1 (add), ~key (delete)
  --print-config      print the composed, validated config and exit
  -h, --help          this help; with --config, the job's keys and their help texts

verbs:
  list                runnable configs with their one-line description
  data                record files (convert, inspect): mstrain data --help
  plan, ckpt          parallel plans and checkpoint resharding: mstrain plan --help
  dump compare A B    the first op whose dumped tensors differ between two runs (dump=FILE)
  report RUN_DIR      one HTML page of a run (curves, profiler tables, folded graph, config)
  lineage RUN_DIR...  runs side by side: the config keys that differ, data changes, metrics

examples:
  mstrain list
  mstrain --config configs/mlp_mnist.yaml
  mstrain --config mlp_mnist train.epochs=3 optimizer.lr=0.002
  mpiexec -n 2 mstrain --config configs/mlp_mnist.yaml parallel.parallel_mode=data_parallel

environment: MSTRAIN_LOG_LEVEL (DEBUG, INFO, ...), MSTRAIN_CONFIG_PATH, MSTRAIN_DISABLE_KERNELS=1
exit codes: 0 success, 2 bad config or input (one line naming the key or file), 1 internal error
"""


def main(argv=None):
    """Entry point of the `mstrain` console script; returns (and exits with) the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _dispatch(argv)
    except UserError as exc:
        code = _user_error(exc)
    except BrokenPipeError:  # `mstrain list | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    except (OSError, UnicodeDecodeError) as exc:
        if not _is_missing_input(exc):
            raise
        code = _user_error(exc)
    return code or 0


def _user_error(exc):
    message = " ".join(str(exc).split()) or type(exc).__name__
    print(f"mstrain: error: {message}", file=sys.stderr)
    if "mstrain.communication" in sys.modules:  # under mpiexec: end the other ranks as well
        sys.modules["mstrain.communication"].management.abort_job_if_parallel(EXIT_USER_ERROR)
    return EXIT_USER_ERROR


def _is_missing_input(exc):
    """Missing or unreadable files the user named are user errors; other OSErrors are bugs."""
    return isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
                            UnicodeDecodeError))


def _dispatch(argv):
    if not argv:
        sys.stderr.write(USAGE)
        return EXIT_USER_ERROR
    if argv[0] in VERBS:
        return _run_verb(argv[0], argv[1:])
    if argv[0] in ("-h", "--help") and len(argv) == 1:
        sys.stdout.write(USAGE)
        return 0
    return _run_config(*_parse_run_args(argv))


def _run_verb(verb, rest):
    target, *leading = VERBS[verb].split()
    module_name, function_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise UserError(f"'mstrain {verb}' needs {module_name}, which is not installed") from None
        raise
    try:
        return getattr(module, function_name)(leading + list(rest))
    except SystemExit as exc:  # argparse inside the verb: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USER_ERROR)


def _parse_run_args(argv):
    """(config, overrides, flags) from `--config FILE key=value ... [--print-config] [--help]`."""
    config, overrides, flags = None, [], set()
    args = iter(argv)
    for arg in args:
        if arg in ("-c", "--config"):
            config = next(args, None)
            if config is None:
                raise UserError(f"{arg} needs a config file (mstrain list shows them)")
        elif arg.startswith("--config="):
            config = arg.split("=", 1)[1]
        elif arg in ("--print-config", "-h", "--help"):
            flags.add("help" if arg in ("-h", "--help") else arg[2:])
        elif arg.startswith("-") and not arg.startswith("~"):
            raise UserError(f"unknown option {arg!r} (see mstrain --help)")
        elif "=" in arg or arg.startswith("~"):
            overrides.append(arg)
        else:
            raise UserError(f"unexpected argument {arg!r}: overrides look like key=value "
                            f"and verbs are {', '.join(VERBS)}")
    if config is None:
        raise UserError("no config given: mstrain --config configs/<job>.yaml (mstrain list shows them)")
    return config, overrides, flags


def _run_config(config, overrides, flags):
    from .config import load_job_config
    from .log import get_logger, is_main_process

    loaded = load_job_config(config, overrides)
    if flags:
        if is_main_process():
            _print_config(loaded, with_help="help" in flags)
        return 0
    get_logger().debug("running job %s from %s", loaded.job.name, loaded.source)
    from .observe import observed_run
    with observed_run(loaded.cfg) as finish:
        result = loaded.job.run(loaded.cfg)
        finish(result)
    if is_main_process():
        print(f"{loaded.job.name}: " + json.dumps(_jsonable(result or {}), sort_keys=True))
    return 0


def _print_config(loaded, with_help):
    import dataclasses

    import yaml

    from .config import field_help
    values = dataclasses.asdict(loaded.cfg)
    if not with_help:
        print(yaml.safe_dump(_jsonable(values), sort_keys=False).rstrip())
        return
    print(f"job {loaded.job.name}: {loaded.job.description}\nkeys of {loaded.source} (current value):")
    for key, text in field_help(loaded.job.schema).items():
        value = values
        for part in key.split("."):
            value = value[part]
        print(f"  {key} = {json.dumps(_jsonable(value))}\n      {text}")


def _jsonable(value):
    """Plain JSON/YAML types: tuples -> lists, numpy scalars -> Python numbers."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    return value


def list_main(argv):
    """`mstrain list`: the runnable configs, one per line, with their job and description."""
    from .config import list_configs
    if argv:
        raise UserError(f"'mstrain list' takes no arguments, got {' '.join(argv)}")
    entries = list_configs()
    if not entries:
        print("no configs found (looked in ./configs, the repo's configs/ and MSTRAIN_CONFIG_PATH)")
        return 0
    width = max(len(e.name) for e in entries)
    for entry in entries:
        print(f"{entry.name:<{width}}  {entry.description}  [job: {entry.job}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
