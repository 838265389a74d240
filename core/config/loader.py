"""Finding config files, composing them with hydra, and resolving the paths they name.

Search order for a config named without a directory (and for `mstrain list`):
  1. ./configs of the current directory,
  2. <repo root>/configs, the root derived from this package's location (source checkout,
     editable install),
  3. every directory in MSTRAIN_CONFIG_PATH (os.pathsep-separated).
Composition is hydra's compose API: `defaults:` lists include other configs, and overrides are
hydra overrides (`key.sub=value`, `+new.key=value`, `~key`). A plain `key=value` is applied as
`++key=value` (set or add) so that a misspelt key reaches the schema check, which names it and
suggests the closest valid key, instead of hydra's generic refusal.
"""
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import ConfigError, DatasetNotFoundError

__all__ = ["repo_root", "config_dirs", "find_config", "list_configs", "describe_config", "compose",
           "resolve_path", "ConfigEntry"]


def repo_root():
    """The directory that holds the `core` package (the repository root of a checkout)."""
    return Path(__file__).resolve().parents[2]


def config_dirs():
    """Existing config directories in search order, without duplicates."""
    candidates = [Path.cwd() / "configs", repo_root() / "configs"]
    candidates += [Path(p) for p in os.environ.get("MSTRAIN_CONFIG_PATH", "").split(os.pathsep) if p]
    seen, result = set(), []
    for directory in candidates:
        resolved = directory.expanduser().resolve()
        if resolved.is_dir() and resolved not in seen:
            seen.add(resolved)
            result.append(resolved)
    return result


def find_config(name):
    """Path of the config `name`: a file path, or a name looked up in `config_dirs()` (.yaml optional)."""
    given = Path(name).expanduser()
    if given.is_file():
        return given
    names = [given] if given.suffix in (".yaml", ".yml") else [given.with_name(given.name + ".yaml"), given]
    for directory in config_dirs():
        for candidate in names:
            for path in (directory / candidate, directory / candidate.name):
                if path.is_file():
                    return path
    looked = ", ".join(str(d) for d in config_dirs()) or "no config directory exists"
    raise ConfigError(f"config file not found: {name} (also looked in: {looked})")


def _display(path):
    """The path as a user would type it: relative to the current directory when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def describe_config(path):
    """The first comment line of a YAML file (its one-line description), without the '#'."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = line.strip()
            if text.startswith("#") and not text.startswith("# @"):
                return text.lstrip("#").strip()
            if text and not text.startswith("#"):
                break
    return ""


@dataclass(frozen=True)
class ConfigEntry:
    """A runnable config: its name (file stem), file, job and one-line description."""
    name: str
    path: Path
    job: str
    description: str


def list_configs():
    """Runnable configs (top-level YAML files with a `job:` key) of every config dir; first one wins."""
    entries = {}
    for directory in config_dirs():
        for path in sorted(directory.glob("*.yaml")):
            if path.stem in entries:
                continue
            try:
                data = _read_yaml(path)
                job = data.get("job") if isinstance(data, dict) else None
            except ConfigError:
                job = "?"  # listed anyway: running it reports the syntax error
            if job:
                entries[path.stem] = ConfigEntry(path.stem, path, str(job), describe_config(path))
    return sorted(entries.values(), key=lambda e: e.name)


def _read_yaml(path):
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"invalid YAML{where}: {problem}", source=_display(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read config: {exc.strerror}", source=_display(path)) from None


def _hydra_overrides(overrides, config_dir):
    """Hydra override strings, and {dotted key: original text} to name overrides in errors."""
    result, origins = [], {}
    for text in overrides:
        if "=" not in text and not text.startswith("~"):
            raise ConfigError(f"override {text!r}: expected key=value (e.g. train.epochs=3)")
        key = text.split("=", 1)[0]
        bare = key.lstrip("+~")
        if not bare:
            raise ConfigError(f"override {text!r}: empty key")
        origins[bare] = text
        is_group = (config_dir / bare.replace(".", os.sep)).is_dir()  # `model=small` picks a file
        result.append("++" + text if key == bare and not is_group else text)
    return result, origins


def compose(path, overrides=()):
    """Compose the config file `path` with hydra and apply `overrides`.

    Returns (mapping, source, origins): the composed plain dict, the file name to use in errors,
    and {dotted key: override text}. Raises ConfigError for a missing/unreadable file, bad YAML,
    a bad `defaults:` entry or an unparsable override.
    """
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.errors import HydraException, OverrideParseException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = find_config(path)
    source = _display(path)
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("the file must hold a mapping of keys (job: ..., train: ...)", source=source)
    config_dir = path.resolve().parent
    hydra_overrides, origins = _hydra_overrides(overrides, config_dir)
    try:
        with warnings.catch_warnings(), initialize_config_dir(config_dir=str(config_dir), version_base=None):
            warnings.filterwarnings("ignore", message=".*Defaults list is missing `_self_`")
            composed = hydra_compose(config_name=path.stem, overrides=hydra_overrides)
        mapping = OmegaConf.to_container(composed, resolve=True)
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as exc:
        message = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        if isinstance(exc, OverrideParseException):
            original = origins.get(exc.override.split("=", 1)[0].lstrip("+~"), exc.override)
            message = f"override {original!r}: {message}"
        raise ConfigError(message, source=source) from None
    return mapping, source, origins


def resolve_path(path, what="dataset", key=None):
    """An existing file or directory named in a config: absolute, else relative to the current
    directory, else to the repo root. Raises DatasetNotFoundError naming the config `key` (when
    given) and every place looked at."""
    given = Path(path).expanduser()
    candidates = [given] if given.is_absolute() else [Path.cwd() / given, repo_root() / given]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    tried = " or ".join(str(c) for c in candidates)
    where = f"{key}: " if key else ""
    raise DatasetNotFoundError(f"{where}{what} not found: {path} (looked for {tried})")
