"""mstrain.config: hydra composition, overrides, schema validation and the messages of bad configs."""
import dataclasses
import textwrap
from dataclasses import dataclass
from enum import Enum
from typing import Dict, List, Literal, Optional, Tuple

import pytest

from mstrain import registry
from mstrain.config import (JobConfig, TrainConfig, compose, field_help, find_config, list_configs,
                         load_job_config, option, resolve_path, section, validate)
from mstrain.errors import ConfigError, DatasetNotFoundError


class Color(Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Inner:
    """A nested section."""
    size: int = option(3, "a size", low=1)
    ratio: float = option(0.5, "a ratio", low=0.0, high=1.0)


@dataclass
class Example:
    """A schema exercising every supported annotation."""
    name: str = option("x", "a name")
    count: int = option(1, "a count")
    scale: float = option(1.0, "a scale")
    flag: bool = option(False, "a flag")
    maybe: Optional[int] = option(None, "an optional int")
    kind: Literal["a", "b"] = option("a", "a literal choice")
    color: Color = option(Color.RED, "an enum")
    widths: List[int] = option([4], "a list")
    pair: Tuple[float, float] = option((0.1, 0.2), "a pair")
    table: Dict[str, int] = option({}, "a mapping")
    mode: str = option("fast", "a choice", choices=("fast", "slow"))
    inner: Inner = section(Inner)


def _fails(data, schema=Example, match=None):
    with pytest.raises(ConfigError, match=match) as info:
        validate(data, schema, "cfg.yaml")
    return str(info.value)


# -- validation --------------------------------------------------------------------------------------
def test_validate_builds_typed_instance_with_conversions():
    cfg = validate({"name": 2024, "count": 3.0, "scale": 2, "maybe": 5, "kind": "b", "color": "blue",
                    "widths": [1, 2], "pair": [1, "1e-3"], "table": {"k": 1}, "inner": {"size": 7}},
                   Example, "cfg.yaml")
    assert cfg.name == "2024" and cfg.count == 3 and isinstance(cfg.count, int)
    assert cfg.scale == 2.0 and isinstance(cfg.scale, float)
    assert cfg.color is Color.BLUE and cfg.pair == (1.0, 0.001) and cfg.widths == [1, 2]
    assert cfg.inner == Inner(size=7, ratio=0.5) and cfg.table == {"k": 1}
    defaults = validate({}, Example, "cfg.yaml")
    assert defaults == Example() and defaults.widths is not Example().widths


@pytest.mark.parametrize("data,message", [
    ({"cuont": 1}, "cfg.yaml:cuont: unknown key \\(did you mean 'count'\\?\\)"),
    ({"inner": {"sise": 1}}, "cfg.yaml:inner.sise: unknown key \\(did you mean 'inner.size'\\?\\)"),
    ({"zzz": 1}, "zzz: unknown key; valid keys here: color, count"),
    ({"count": "ten"}, "cfg.yaml:count: expected int, got 'ten'"),
    ({"count": True}, "count: expected int, got True"),
    ({"count": 2.5}, "count: expected int, got 2.5"),
    ({"flag": "yes"}, "flag: expected bool, got 'yes'"),
    ({"kind": "c"}, "kind: expected one of 'a', 'b', got 'c'"),
    ({"color": "green"}, "color: expected one of 'red', 'blue', got 'green'"),
    ({"mode": "medium"}, "mode: 'medium' is not one of 'fast', 'slow'"),
    ({"widths": [1, "x"]}, "widths\\[1\\]: expected int, got 'x'"),
    ({"pair": [1.0]}, "pair: expected a list of 2 items"),
    ({"inner": 3}, "inner: expected a mapping of Inner keys, got 3"),
    ({"inner": {"ratio": 1.5}}, "inner.ratio: 1.5 is outside \\[0.0, 1.0\\]"),
    ({"inner": {"size": 0}}, "inner.size: 0 is outside \\[1, inf\\]"),
    ({"maybe": "x"}, "maybe: expected int or None, got 'x'"),
])
def test_validate_errors_name_file_key_and_problem(data, message):
    _fails(data, match=message)


def test_validate_reports_missing_required_key_and_post_init_errors():
    @dataclass
    class Required:
        path: str = option(help="where the data is")

    _fails({}, Required, match="cfg.yaml:path: missing required key \\(where the data is\\)")
    _fails({"optimizer": {"betas": [0.9, 1.0]}}, JobConfig, match="cfg.yaml:optimizer: betas must be < 1")


def test_validate_mentions_the_override_that_set_a_bad_value():
    with pytest.raises(ConfigError, match="count: expected int, got 'ten' \\(set by override count=ten\\)"):
        validate({"count": "ten"}, Example, "cfg.yaml", overrides={"count": "count=ten"})


def test_every_common_key_is_documented_once():
    helps = field_help(JobConfig)
    assert "train.epochs" in helps and "optimizer.betas" in helps and "parallel.micro_batch_num" in helps
    assert all(text for text in helps.values())
    with pytest.raises(ValueError, match="help"):
        option(1)


# -- composition and overrides -------------------------------------------------------------------------
def _write(directory, name, text):
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def config_dir(tmp_path):
    _write(tmp_path, "common.yaml", """\
        train:
          epochs: 1
          batch_size: 16
        optimizer:
          lr: 0.1
    """)
    _write(tmp_path, "main.yaml", """\
        # Main test config: includes common
        defaults:
          - common
          - _self_
        job: echo_test
        train:
          epochs: 3
        optimizer:
          lr: ${train.epochs}
    """)
    return tmp_path


def test_defaults_compose_and_self_wins(config_dir):
    mapping, source, origins = compose(str(config_dir / "main.yaml"))
    assert mapping["train"] == {"epochs": 3, "batch_size": 16}
    assert mapping["optimizer"]["lr"] == 3  # interpolation resolved after composition
    assert origins == {} and source.endswith("main.yaml")


def test_overrides_set_add_delete_and_parse_types(config_dir):
    mapping, _, origins = compose(str(config_dir / "main.yaml"), [
        "train.epochs=7", "train.seed=4", "+extra.key=[1,2]", "optimizer.betas=[0.8,0.9]", "~train.batch_size"])
    assert mapping["train"] == {"epochs": 7, "seed": 4}
    assert mapping["extra"] == {"key": [1, 2]} and mapping["optimizer"]["betas"] == [0.8, 0.9]
    assert mapping["optimizer"]["lr"] == 7
    assert origins["train.epochs"] == "train.epochs=7" and origins["extra.key"] == "+extra.key=[1,2]"


@pytest.mark.parametrize("overrides,message", [
    (["train.epochs"], "override 'train.epochs': expected key=value"),
    (["+train.epochs=2"], "main.yaml: Could not append to config"),
    (["train.epochs=[1,"], "main.yaml: override .train.epochs=\\[1,.: no viable alternative"),
])
def test_bad_overrides_are_config_errors(config_dir, overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose(str(config_dir / "main.yaml"), overrides)


def test_bad_yaml_and_bad_defaults_name_the_file(config_dir):
    _write(config_dir, "broken.yaml", "job: x\ntrain: [1\n")
    with pytest.raises(ConfigError, match="broken.yaml: invalid YAML at line 3"):
        compose(str(config_dir / "broken.yaml"))
    _write(config_dir, "nodefault.yaml", "defaults:\n  - missing_one\njob: x\n")
    with pytest.raises(ConfigError, match="nodefault.yaml: .*missing_one"):
        compose(str(config_dir / "nodefault.yaml"))
    _write(config_dir, "scalar.yaml", "42\n")
    with pytest.raises(ConfigError, match="scalar.yaml: the file must hold a mapping"):
        compose(str(config_dir / "scalar.yaml"))


# -- finding configs and data --------------------------------------------------------------------------
def test_find_config_search_order(config_dir, tmp_path_factory, monkeypatch):
    elsewhere = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ConfigError, match="config file not found: main"):
        find_config("main")
    monkeypatch.setenv("MSTRAIN_CONFIG_PATH", str(config_dir))
    assert find_config("main") == config_dir / "main.yaml"
    assert find_config("configs/main.yaml") == config_dir / "main.yaml"
    _write(elsewhere, "configs/main.yaml", "# local wins\njob: local\n")
    assert find_config("main").resolve() == (elsewhere / "configs" / "main.yaml").resolve()
    assert find_config("mlp_mnist").name == "mlp_mnist.yaml"  # the repo's configs/, found from anywhere


def test_list_configs_shows_runnable_files_with_description(config_dir, monkeypatch):
    monkeypatch.setenv("MSTRAIN_CONFIG_PATH", str(config_dir))
    entries = {e.name: e for e in list_configs()}
    assert entries["main"].description == "Main test config: includes common"
    assert entries["main"].job == "echo_test"
    assert "common" not in entries  # no `job:`: a fragment, not runnable
    assert entries["mlp_mnist"].job == "mlp_mnist"


def test_resolve_path_looks_in_cwd_then_repo_root(tmp_path, monkeypatch, repo_root):
    monkeypatch.chdir(tmp_path)
    assert resolve_path("data/images/mnist/mnist_test10k.npz") == repo_root / "data/images/mnist/mnist_test10k.npz"
    (tmp_path / "data").mkdir()
    assert resolve_path("data") == tmp_path / "data"
    with pytest.raises(DatasetNotFoundError, match="MNIST file not found: nope.npz"):
        resolve_path("nope.npz", "MNIST file")
    with pytest.raises(DatasetNotFoundError, match="^data.path: MNIST file not found: nope.npz"):
        resolve_path("nope.npz", "MNIST file", key="data.path")


# -- registry and load_job_config ----------------------------------------------------------------------
@dataclass
class EchoConfig(JobConfig):
    """Config of the echo_test job."""
    message: str = option("hi", "what to echo")


@pytest.fixture
def echo_job(monkeypatch):
    monkeypatch.setattr(registry, "_jobs", dict(registry._jobs))

    @registry.register_job("echo_test", schema=EchoConfig)
    def run(cfg):
        """Echo the config."""
        return {"message": cfg.message, "epochs": cfg.train.epochs}

    return run


def test_load_job_config_validates_against_the_jobs_schema(config_dir, echo_job):
    loaded = load_job_config(str(config_dir / "main.yaml"), ["message=bye", "optimizer.lr=0.5"])
    assert loaded.job.run is echo_job and loaded.job.description == "Echo the config."
    assert loaded.cfg.message == "bye" and loaded.cfg.train.epochs == 3 and loaded.cfg.optimizer.lr == 0.5
    assert isinstance(loaded.cfg.train, TrainConfig) and loaded.cfg.train.batch_size == 16
    with pytest.raises(ConfigError, match="main.yaml:mesage: unknown key \\(did you mean 'message'\\?\\)"):
        load_job_config(str(config_dir / "main.yaml"), ["mesage=bye"])


def test_unknown_job_lists_known_jobs(config_dir, echo_job):
    _write(config_dir, "other.yaml", "job: ecko_test\n")
    with pytest.raises(ConfigError, match="other.yaml:job: unknown job 'ecko_test'; did you mean 'echo_test'.*"
                                          "known jobs: .*mlp_mnist"):
        load_job_config(str(config_dir / "other.yaml"))
    _write(config_dir, "nojob.yaml", "train: {epochs: 1}\n")
    with pytest.raises(ConfigError, match="nojob.yaml:job: no `job:` key"):
        load_job_config(str(config_dir / "nojob.yaml"))


def test_register_job_rejects_undocumented_schema_and_duplicates(echo_job):
    @dataclass
    class Undocumented:
        size: int = 3

    with pytest.raises(TypeError, match="Undocumented.size.*no help"):
        registry.register_job("bad_job", schema=Undocumented)
    with pytest.raises(ValueError, match="registered twice"):
        registry.register_job("echo_test")(lambda cfg: {})


def test_core_and_kit_jobs_are_found_lazily():
    assert "mlp_mnist" in registry.known_jobs()
    job = registry.get_job("mlp_mnist")
    assert job.schema.__name__ == "MlpMnistConfig" and dataclasses.is_dataclass(job.schema)


def test_parallel_section_matches_the_parallel_engine_keys():
    from mstrain.config import ParallelConfig
    from mstrain.parallel.config import PARALLEL_KEYS
    fields = {f.name: f.default for f in dataclasses.fields(ParallelConfig)}
    assert fields == PARALLEL_KEYS
