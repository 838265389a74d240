"""`mstrain plan --config widedeep_criteo -n N`: per-rank memory of each table and level."""
import json

import pytest

from mstrain.config import load_job_config
from mstrain.recommender.plan import memory_plan


def _cfg(*overrides):
    return load_job_config("configs/widedeep_criteo.yaml", list(overrides)).cfg


def test_memory_plan_counts_rows_states_and_levels(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    plan = memory_plan(_cfg(), rows=1000, ranks=8)
    deep, wide = plan["tables"]
    assert deep["rows_per_rank"] == 125 and deep["level2_host_bytes"] == 125 * 16 * 4 * 3
    assert wide["level2_host_bytes"] == 125 * 1 * 4 * 3 and deep["level3_disk_bytes"] == 0
    mlp = 429 * 256 + 256 + 256 * 128 + 128 + 128 * 64 + 64 + 64 + 1
    assert plan["dense_bytes"] == (mlp + 14) * 4 * 3
    assert plan["resident_bytes"] == plan["dense_bytes"] + deep["resident_bytes"] + wide["resident_bytes"]
    disk = memory_plan(_cfg("model.disk_dir=/tmp/x", "model.vocab_cache_size=10"), rows=1000, ranks=8)
    deep = disk["tables"][0]
    assert deep["level2_host_bytes"] == 0 and deep["level3_disk_bytes"] == 125 * 16 * 4 * 3
    assert deep["level1_cache_bytes"] == 10 * (16 * 4 * 3 + 12) + 125 * 4


def test_level1_bytes_is_what_a_cached_table_holds():
    from mstrain import nn
    from mstrain.recommender.store import CachedEmbeddingLookup, level1_bytes
    table = CachedEmbeddingLookup(125, 16, 10, param_init="zeros")
    table.attach_optimizer(nn.LazyAdam(table.trainable_params(), learning_rate=0.1))  # two moments per row
    assert table.level1_nbytes == level1_bytes(125, 10, 16 * 4 * 3)


def test_cli_prints_the_table_and_refuses_a_budget_it_exceeds(mstrain, repo_root, tmp_path, monkeypatch):
    monkeypatch.chdir(repo_root)
    config = tmp_path / "wd.yaml"
    config.write_text((repo_root / "configs" / "widedeep_criteo.yaml").read_text().replace(
        "outputs/criteo_records", str(tmp_path / "records")))
    code, out, err = mstrain("plan", "--config", str(config), "-n", "8")
    assert code == 0, err
    assert "on 8 rank(s)" in out and out.count("\n") == 6 and "deep" in out and "wide" in out
    code, out, _ = mstrain("plan", "--config", str(config), "-n", "2", "--json")
    assert json.loads(out)["ranks"] == 2
    code, _, err = mstrain("plan", "--config", str(config), "-n", "8", "--memory-limit-gb", "0.001")
    assert code == 2 and "the dense part needs" in err and "budget" in err
