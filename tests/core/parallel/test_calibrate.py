"""The cost model's calibration: `mstrain plan --calibrate` measures this machine and writes a
profile that later plans use; the size-dependent matrix-product rate; the dispatch term."""
import json
import math

import numpy as np
import pytest

from mstrain.parallel import calibrate
from mstrain.parallel.cost_model import Hardware, TransformerSpec, layer_plan
from mstrain.parallel.search import Candidate, evaluate, search

GPT = "model: {n_layer: 4, n_embd: 128, n_head: 4, vocab_size: 256, block_size: 64}\ntrain: {batch_size: 8}\n"


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "gpt.yaml"
    path.write_text(GPT)
    return path


def test_calibrate_writes_a_profile_that_later_plans_use(config, mstrain):
    code, out, err = mstrain("plan", "--calibrate", "--calibrate-ranks", "2")
    assert code == 0, err
    path = calibrate.profile_path()
    assert f"wrote {path}" in out and "us per primitive call" in out
    profile = json.loads(path.read_text())
    hw = calibrate.hardware_from_profile(profile)
    for name in ("flops", "memory_bandwidth", "op_overhead", "norm_cost", "gelu_cost", "attention_cost",
                 "add_cost", "xent_cost", "optimizer_cost", "latency", "bandwidth"):
        value = getattr(hw, name)
        assert math.isfinite(value) and value > 0, name
    assert 1e8 < hw.flops < 1e14 and 1e-8 < hw.op_overhead < 1e-2
    sizes = [f for f, _ in hw.matmul_curve]
    assert sizes == sorted(sizes) and len(sizes) >= 5
    assert max(r for _, r in hw.matmul_curve) == 1.0 and min(r for _, r in hw.matmul_curve) > 0
    assert hw.ops_per_layer > 50 and hw.ops_fixed > 10  # counted on a real layer of mstrain.parallel.layers
    assert set(profile["links"]) == {"1", "2"} and profile["links"]["2"]["bandwidth"] > 0
    assert hw.shared_slowdown >= 1.0 and hw.collective_sync >= 0.0
    code, out, err = mstrain("plan", "--config", str(config), "-n", "2", "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert str(path) in plan["hardware_profile"]
    spec = TransformerSpec(4, 128, 4, 256, 64, 16)
    best, _, _ = search(spec, 2, calibrate.hardware_from_profile(profile, memory=16 * 2 ** 30))
    assert plan["predicted_step_time_s"] == pytest.approx(best.step_time)


def test_plan_without_a_profile_says_it_uses_the_defaults(config, mstrain):
    code, out, err = mstrain("plan", "--config", str(config), "-n", "2")
    assert code == 0, err
    assert "hardware: built-in defaults (run `mstrain plan --calibrate`" in out


def test_a_profile_changes_the_prediction_and_a_broken_one_is_a_user_error(config, mstrain):
    path = calibrate.profile_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    slow = {"format": "mstrain-hardware-profile", "version": 1, "hardware": {"op_overhead": 1e-3}}
    path.write_text(json.dumps(slow))
    code, out, _ = mstrain("plan", "--config", str(config), "-n", "1", "--json")
    slow_time = json.loads(out)["predicted_step_time_s"]
    path.write_text(json.dumps({**slow, "hardware": {"op_overhead": 1e-6}}))
    code, out, _ = mstrain("plan", "--config", str(config), "-n", "1", "--json")
    fast_time = json.loads(out)["predicted_step_time_s"]
    calls = 4 * Hardware().ops_per_layer + Hardware().ops_fixed  # 4 layers, embedding + head + loss
    updates = 16 * 4 + 5  # one optimizer call per parameter tensor
    assert slow_time - fast_time == pytest.approx((calls + updates) * (1e-3 - 1e-6), rel=1e-6)
    path.write_text("{not json")
    code, out, err = mstrain("plan", "--config", str(config), "-n", "1")
    assert code == 2 and str(path) in err and "--calibrate" in err


def test_product_rate_follows_the_measured_curve():
    hw = Hardware(flops=4e9, matmul_curve=((1e6, 0.25), (1e8, 0.75)))
    assert hw.product_rate(1e5) == 1e9 and hw.product_rate(1e9) == 3e9  # clamped at the ends
    assert hw.product_rate(1e7) == pytest.approx(2e9)  # halfway in log(flops)
    assert hw.matmul_time(100, 100, 50) == pytest.approx(3 * 1e6 / 1e9)  # three products of 1e6 flops
    assert Hardware(flops=9e9, matmul_curve=()).product_rate(1e3) == 9e9  # no curve: one rate
    assert Hardware(flops=2e10).product_rate(1e12) == pytest.approx(2 * Hardware(flops=1e10).product_rate(1e12))


def test_dispatch_dominates_a_small_model_and_is_counted_per_layer_and_micro_batch():
    hw = Hardware()
    tiny = TransformerSpec(num_layers=2, hidden_size=16, num_heads=2, vocab_size=32, seq_length=8, batch_size=8)
    plan = layer_plan(hw, tiny, 1, 4)
    assert plan.dispatch_time == pytest.approx(hw.ops_per_layer * hw.op_overhead)
    one = evaluate(hw, tiny, Candidate(1, 1, 1, 1, False, False), lambda m, b: layer_plan(hw, tiny, m, b))
    assert one.breakdown["dispatch_overhead"] > 0.5 * one.step_time
    two = evaluate(hw, tiny, Candidate(1, 1, 2, 4, False, False), lambda m, b: layer_plan(hw, tiny, m, b))
    assert two.breakdown["dispatch_overhead"] == pytest.approx(4 * (1 * plan.dispatch_time
                                                                    + hw.ops_fixed * hw.op_overhead))


def test_ranks_sharing_the_machine_slow_the_compute_not_the_links():
    spec = TransformerSpec(num_layers=2, hidden_size=64, num_heads=4, vocab_size=64, seq_length=16, batch_size=8)
    plans = {}
    results = []
    for slowdown in (1.0, 2.0):
        hw = Hardware(shared_slowdown=slowdown)
        cand = evaluate(hw, spec, Candidate(2, 1, 1, 1, False, False), lambda m, b: layer_plan(hw, spec, m, b))
        plans[slowdown] = cand
        results.append(cand.step_time - cand.breakdown["data_parallel_comm"])
    assert results[1] == pytest.approx(2 * results[0])
    assert plans[1.0].breakdown["data_parallel_comm"] == plans[2.0].breakdown["data_parallel_comm"]


def test_the_counting_tracer_counts_forward_and_backward_calls():
    import mstrain as ms
    from mstrain.ops import functional as F
    x = ms.Tensor(np.ones(3, np.float32))
    grad = ms.value_and_grad(lambda t: F.sum(F.mul(t, 2.0)), 0)
    calls, seconds = calibrate._calls_and_time(lambda: grad(x))
    assert calls >= 3 and seconds > 0  # mul and sum forward, at least one backward op
    forward_only, _ = calibrate._calls_and_time(lambda: F.sum(F.mul(x, 2.0)))
    assert forward_only == 2
