"""Configuration: YAML files composed by hydra, overridden from the command line, validated
against the typed schema that the job registered.

>>> from mstrain.config import load_job_config
>>> loaded = load_job_config("configs/mlp_mnist.yaml", ["train.epochs=2"])  # doctest: +SKIP
>>> loaded.cfg.train.epochs                                                  # doctest: +SKIP
2
"""
from dataclasses import asdict, dataclass

from ..errors import ConfigError
from .loader import (ConfigEntry, compose, config_dirs, describe_config, find_config, list_configs,
                     repo_root, resolve_path)
from .schema import (DataConfig, JobConfig, OptimizerConfig, ParallelConfig, TrainConfig, field_help,
                     option, section)
from .validate import validate

__all__ = [
    "load_job_config", "LoadedConfig", "validate", "compose", "find_config", "list_configs",
    "config_dirs", "describe_config", "repo_root", "resolve_path", "to_dict", "ConfigEntry",
    "option", "section", "field_help", "JobConfig", "TrainConfig", "OptimizerConfig",
    "ParallelConfig", "DataConfig",
]


@dataclass(frozen=True)
class LoadedConfig:
    """A composed, validated config: the job to run and its typed config."""
    job: object  # mstrain.registry.Job
    cfg: object  # instance of job.schema
    source: str  # the config file, as shown in messages


def load_job_config(path, overrides=()):
    """Compose `path` with `overrides`, look up its `job:` and validate against the job's schema.

    Raises ConfigError (missing file, bad YAML, unknown job, unknown key, wrong type, bad value).
    """
    from ..registry import get_job

    mapping, source, origins = compose(path, overrides)
    name = mapping.get("job")
    if not name or not isinstance(name, str):
        raise ConfigError("no `job:` key naming the job to run", source=source, key="job")
    try:
        job = get_job(name)
    except ConfigError as exc:
        raise ConfigError(str(exc), source=source, key="job") from None
    return LoadedConfig(job, validate(mapping, job.schema, source, origins), source)


def to_dict(cfg):
    """A validated config as plain nested dicts/lists (for logs, checkpoints, summaries)."""
    return asdict(cfg)
