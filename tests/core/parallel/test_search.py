"""The strategy search: cost model formulas, the per-layer dynamic programming, the memory limit,
and `mstrain plan` on a 24-layer GPT over 64 ranks."""
import json

import pytest

from mstrain.errors import ParallelConfigError
from mstrain.parallel.cost_model import Hardware, TransformerSpec, layer_plan, redistribution_time
from mstrain.parallel.search import search

GPT24 = TransformerSpec(num_layers=24, hidden_size=2048, num_heads=16, vocab_size=50304, seq_length=1024,
                        batch_size=512)
GIB = 2.0 ** 30


def test_ring_collective_costs():
    hw = Hardware(bandwidth=1e9, latency=1e-5, collective_sync=1e-3)
    assert hw.all_reduce(1e9, 1) == 0.0
    assert hw.all_reduce(1e9, 4) == pytest.approx(2 * 3 / 4 + 6e-5 + 1e-3)
    assert hw.all_gather(1e9, 4) == pytest.approx(3 / 4 + 3e-5 + 1e-3)
    assert hw.send(1e9) == pytest.approx(1 + 1e-5 + 1e-3)
    assert redistribution_time(hw, "P", "R", 1e9, 4) == hw.all_reduce(1e9, 4)
    assert redistribution_time(hw, "R", "R", 1e9, 4) == 0.0


def test_layer_dp_finds_megatron_column_row_pairs():
    plan = layer_plan(Hardware(), GPT24, 8, 1)
    assert plan.strategies == {"attention.qkv": "col", "attention.core": "heads", "attention.dense": "row",
                               "mlp.mapping": "col", "mlp.projection": "row"}
    assert plan.weight_fraction == pytest.approx(1 / 8)
    single = layer_plan(Hardware(), GPT24, 1, 1)
    assert set(single.strategies.values()) == {"none"} and single.comm_time == 0.0


def test_search_honours_the_memory_limit():
    generous, _, _ = search(GPT24, 64, Hardware(memory=64 * GIB))
    tight, evaluated, _ = search(GPT24, 64, Hardware(memory=1.5 * GIB))
    assert tight.memory <= 1.5 * GIB < max(c.memory for c in evaluated)
    assert tight.step_time >= generous.step_time
    assert tight.dp * tight.mp * tight.pp == 64 and 16 % tight.mp == 0 and 24 % tight.pp == 0
    with pytest.raises(ParallelConfigError, match=r"no layout of 64 ranks fits memory_limit_gb=0\.01"):
        search(GPT24, 64, Hardware(memory=0.01 * GIB))


def test_search_prefers_data_parallel_when_everything_fits_and_compute_dominates():
    small = TransformerSpec(num_layers=2, hidden_size=64, num_heads=4, vocab_size=64, seq_length=32, batch_size=64)
    best, _, _ = search(small, 4, Hardware())
    assert (best.dp, best.mp, best.pp) == (4, 1, 1)


def test_plan_cli_for_a_24_layer_gpt_on_64_ranks(tmp_path, mstrain):
    config = tmp_path / "gpt.yaml"
    config.write_text("model: {n_layer: 24, n_embd: 2048, n_head: 16, vocab_size: 50304, block_size: 1024}\n"
                      "train: {batch_size: 8}\nparallel: {memory_limit_gb: 16}\n")
    code, out, err = mstrain("plan", "--config", str(config), "-n", "64")
    assert code == 0, err
    assert "layout: data_parallel=" in out and "predicted step time:" in out and "memory per rank:" in out
    assert "attention.qkv" in out and "MatMul" in out
    code, out, err = mstrain("plan", "--config", str(config), "-n", "64", "--json")
    plan = json.loads(out)
    layout = plan["layout"]
    assert layout["data_parallel"] * layout["model_parallel"] * layout["pipeline_stages"] == 64
    assert plan["memory_per_rank_bytes"] <= 16 * GIB
    assert plan["search_seconds"] < 10


def test_plan_cli_names_a_missing_model_key(tmp_path, mstrain):
    config = tmp_path / "bad.yaml"
    config.write_text("model: {n_layer: 2, n_embd: 64, vocab_size: 64, block_size: 8}\n")
    code, out, err = mstrain("plan", "--config", str(config), "-n", "4")
    assert code == 2 and "model.num_heads" in err
