"""`mstrain plan --config X -n N` hands a kit's job to the planner its entry point names."""
import importlib.metadata

from mstrain import registry

SEEN = []


def fake_planner(cfg, ranks, memory_limit_gb, as_json):
    SEEN.append((cfg.job, ranks, memory_limit_gb, as_json))
    return 5


def test_plan_dispatches_to_the_job_planner(mstrain, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    point = importlib.metadata.EntryPoint("mlp_mnist", f"{__name__}:fake_planner", "mstrain.plan")
    real = registry.entry_points
    monkeypatch.setattr(registry, "entry_points",
                        lambda group: {"mlp_mnist": point} if group == "mstrain.plan" else real(group))
    code, _, err = mstrain("plan", "--config", "mlp_mnist", "-n", "4", "--memory-limit-gb", "2", "--json")
    assert code == 5, err
    assert SEEN[-1] == ("mlp_mnist", 4, 2.0, True)
