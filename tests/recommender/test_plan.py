"""`mstrain plan --config widedeep_criteo -n N`: per-rank memory of each table and level."""
import json

import pytest

from mstrain.config import load_job_config
from mstrain.recommender.plan import memory_plan


def _cfg(*overrides):
    return load_job_config("configs/widedeep_criteo.yaml", list(overrides)).cfg


def test_memory_plan_counts_rows_states_and_levels(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    plan = memory_plan(_cfg(), rows=1000, ranks=8)  # on 8 ranks the tables are sharded (level 4)
    deep, wide = plan["tables"]
    assert deep["levels"] == [2, 4] and plan["sharded"]
    assert deep["rows_per_rank"] == 125 and deep["level2_host_bytes"] == 125 * 16 * 4 * 3
    assert wide["level2_host_bytes"] == 125 * 1 * 4 * 3 and deep["level3_disk_bytes"] == 0
    assert deep["level4_exchange_bytes"] == 2 * 128 * 39 * 16 * 4  # the batch rows and their gradient
    mlp = 429 * 256 + 256 + 256 * 128 + 128 + 128 * 64 + 64 + 64 + 1
    assert plan["dense_bytes"] == (mlp + 14) * 4 * 3
    assert plan["resident_bytes"] == plan["dense_bytes"] + deep["resident_bytes"] + wide["resident_bytes"]
    whole = memory_plan(_cfg(), rows=1000, ranks=1)["tables"][0]
    assert whole["levels"] == [2] and whole["rows_per_rank"] == 1000 and whole["level4_exchange_bytes"] == 0
    disk = memory_plan(_cfg("model.disk_dir=/tmp/x", "model.vocab_cache_size=10", "model.shard_tables=true"),
                       rows=1000, ranks=8)
    deep = disk["tables"][0]
    assert deep["levels"] == [1, 3, 4] and deep["level2_host_bytes"] == 0
    assert deep["level1_cache_bytes"] == 10 * (16 * 4 * 3 + 12) + 125 * 4 + (10 + 1024) * 8  # + LRU queue
    assert deep["level3_index_bytes"] == 3 * 125 * 4
    assert deep["level3_disk_bytes"] > 125 * 16 * 4 * 3  # the base files and the log's bound
    assert deep["resident_bytes"] == (deep["level1_cache_bytes"] + deep["level3_index_bytes"]
                                      + deep["level4_exchange_bytes"])


def test_plan_counts_the_resident_bytes_a_disk_store_holds(tmp_path, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    from mstrain import nn
    from mstrain.config import load_job_config
    from mstrain.recommender.plan import _table_plan
    from mstrain.recommender.store import CachedEmbeddingLookup
    table = CachedEmbeddingLookup(125, 16, 10, param_init="zeros", disk_dir=str(tmp_path))
    table.attach_optimizer(nn.LazyAdam(table.trainable_params(), learning_rate=0.1))
    cfg = load_job_config("configs/widedeep_criteo.yaml", [f"model.disk_dir={tmp_path}", "model.vocab_cache_size=10"]).cfg
    planned = _table_plan(cfg, "deep", 16, 125, 1)
    assert planned["level1_cache_bytes"] == table.level1_nbytes
    assert planned["level3_index_bytes"] == sum(t.index_nbytes for t in table.store.tables.values())


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
