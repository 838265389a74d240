"""The job registry: how `mstrain --config X.yaml` finds the code that runs `job: <name>`.

A job is a function `run(cfg) -> dict` (cfg: a validated instance of its schema dataclass;
the dict: its results, e.g. {"test_acc": 0.97}) registered with a decorator:

    from mstrain.config import JobConfig
    from mstrain.registry import register_job

    @register_job("mlp_mnist", schema=MlpMnistConfig)
    def run(cfg):
        '''Train an MLP on MNIST.'''
        ...

Jobs are found lazily, by name, so `mstrain` imports only the job it runs:
  * core's own jobs: the table `_CORE_JOBS` below (job name -> module);
  * kits: entry points of the group `mstrain.jobs` in pyproject.toml,

        [project.entry-points."mstrain.jobs"]
        gcn_cora = "mstrain.gnn.jobs"             # a module: importing it runs its @register_job
        my_job = "mykit.jobs:register"    # or a callable, called once with no arguments

    The entry point's name is the job name. From an installed distribution they come from its
    metadata; in a source checkout that is not installed (PYTHONPATH=.), from the checkout's
    pyproject.toml, so both ways see the same jobs.
core never imports a kit by name: only these entry points do.
"""
import dataclasses
import difflib
import importlib
import importlib.metadata
import typing
from dataclasses import dataclass

from .errors import ConfigError

__all__ = ["register_job", "get_job", "known_jobs", "Job", "ENTRY_POINT_GROUP", "entry_points"]

ENTRY_POINT_GROUP = "mstrain.jobs"
_CORE_JOBS = {"mlp_mnist": "mstrain.jobs.mlp_mnist", "lenet_mnist": "mstrain.jobs.lenet_mnist",
              "resnet8_mnist": "mstrain.jobs.resnet_mnist", "lenet_mnist_qat": "mstrain.jobs.compression_jobs",
              "lenet_mnist_slb": "mstrain.jobs.compression_jobs", "resnet8_mnist_scop": "mstrain.jobs.compression_jobs"}
_jobs = {}


@dataclass(frozen=True)
class Job:
    """A registered job: its name, its `run(cfg) -> dict`, and the schema its config must match."""
    name: str
    run: typing.Callable
    schema: type
    description: str


def register_job(name, schema=None):
    """Decorator registering `run(cfg) -> dict` as the job `name`, configured by `schema`
    (a dataclass, normally a subclass of mstrain.config.JobConfig; default: JobConfig)."""
    if schema is None:
        from .config.schema import JobConfig
        schema = JobConfig
    _check_schema(schema)

    def decorator(run):
        existing = _jobs.get(name)
        if existing is not None and existing.run.__qualname__ != run.__qualname__:
            raise ValueError(f"job {name!r} is registered twice: {existing.run.__module__} and {run.__module__}")
        description = (run.__doc__ or "").strip().splitlines()
        _jobs[name] = Job(name, run, schema, description[0] if description else "")
        return run

    return decorator


def _check_schema(schema, prefix=""):
    """Every key documented once: a schema field without a help text is a programming error."""
    if not dataclasses.is_dataclass(schema):
        raise TypeError(f"a job schema must be a dataclass, got {schema!r}")
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        if dataclasses.is_dataclass(hints[field.name]):
            _check_schema(hints[field.name], f"{prefix}{field.name}.")
        elif not field.metadata.get("help"):
            raise TypeError(f"{schema.__name__}.{field.name}: declare config keys with "
                            f"mstrain.config.option(default, help) ({prefix}{field.name} has no help)")


def get_job(name):
    """The job `name`; imports its provider on first use. Unknown names raise ConfigError listing the known."""
    if name not in _jobs:
        _load_provider(name)
    if name not in _jobs and name in _providers():
        provider = _providers()[name].value
        raise ConfigError(f"job {name!r}: its provider {provider} was loaded but registers no job of "
                          f"that name (registered: {', '.join(sorted(_jobs)) or 'none'})")
    if name not in _jobs:
        known = known_jobs()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"unknown job {name!r}; {hint}known jobs: {', '.join(known) or 'none'}")
    return _jobs[name]


def known_jobs():
    """Names of every job that is registered or can be loaded."""
    return sorted(set(_jobs) | set(_providers()))


def _providers():
    """{job name: entry point}: core's jobs, then installed kits, then the checkout's pyproject.toml."""
    providers = entry_points(ENTRY_POINT_GROUP)
    for name, module in _CORE_JOBS.items():
        providers[name] = importlib.metadata.EntryPoint(name, module, ENTRY_POINT_GROUP)
    return providers


def entry_points(group):
    """{name: EntryPoint} of `group` (e.g. "mstrain.jobs", "mstrain.data"): the installed kits'
    metadata, then the checkout's pyproject.toml for names the metadata lacks (an editable install
    made before an entry point was added still sees it)."""
    found = {}
    for entry_point in _checkout_entry_points(group) + _installed_entry_points(group):
        found[entry_point.name] = entry_point  # installed metadata wins over the checkout file
    return found


def _installed_entry_points(group):
    return list(importlib.metadata.entry_points(group=group))


def _checkout_entry_points(group):
    try:
        import tomllib
    except ImportError:  # Python < 3.11: installed metadata only
        return []
    from .config.loader import repo_root
    pyproject = repo_root() / "pyproject.toml"
    if not pyproject.is_file():
        return []
    with open(pyproject, "rb") as f:
        project = tomllib.load(f).get("project", {})
    if project.get("name") != "mstrain":
        return []
    table = project.get("entry-points", {}).get(group, {})
    return [importlib.metadata.EntryPoint(n, v, group) for n, v in table.items()]


def _load_provider(name):
    entry_point = _providers().get(name)
    if entry_point is None:
        return
    module_name = entry_point.value.split(":")[0].strip()
    try:
        provided = entry_point.load()
    except ModuleNotFoundError as exc:
        kit_missing = exc.name and (module_name == exc.name or module_name.startswith(exc.name + "."))
        if kit_missing:  # the kit itself is absent (not a missing import inside it: that is a bug)
            raise ConfigError(f"job {name!r} comes from {module_name}, which is not installed") from None
        raise
    if name not in _jobs and callable(provided) and ":" in entry_point.value:
        provided()
