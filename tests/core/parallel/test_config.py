"""The parallel config is checked up front: each violation is one sentence naming keys and numbers."""
import pytest

from mstrain.errors import ParallelConfigError
from mstrain.parallel import get_auto_parallel_context, reset_auto_parallel_context, set_auto_parallel_context
from mstrain.parallel.config import validate_parallel_config
from mstrain.parallel.context import data_shard

GPT = {"n_layer": 4, "n_embd": 256, "n_head": 4, "vocab_size": 64, "batch_size": 16}


@pytest.mark.parametrize("parallel,n,model,message", [
    ({"data_parallel": 2, "model_parallel": 2, "pipeline_stages": 2}, 4, None,
     "parallel.data_parallel (2) x parallel.model_parallel (2) x parallel.pipeline_stages (2) = 8 must equal "
     "the number of ranks (4)"),
    ({"model_parallel": 3}, 3, GPT, "model.n_head (4) must be divisible by parallel.model_parallel (3)"),
    ({"model_parallel": 8}, 8, dict(GPT, n_head=8, vocab_size=60),
     "model.vocab_size (60) must be divisible by parallel.model_parallel (8)"),
    ({"pipeline_stages": 3, "micro_batch_num": 3}, 3, GPT,
     "model.n_layer (4) must be divisible by parallel.pipeline_stages (3)"),
    ({"pipeline_stages": 2, "micro_batch_num": 1}, 2, GPT,
     "parallel.micro_batch_num (1) must be at least parallel.pipeline_stages (2)"),
    ({"data_parallel": 3}, 3, GPT,
     "model.batch_size (16) must be divisible by parallel.data_parallel (3) x parallel.micro_batch_num (1) = 3"),
    ({"parallel_mode": "data_parallel", "model_parallel": 2}, 2, None,
     "parallel.parallel_mode is data_parallel but parallel.model_parallel (2)"),
    ({"parallel_mode": "fast"}, 1, None, "parallel.parallel_mode='fast' is not one of"),
    ({"modle_parallel": 2}, 2, None, "unknown key parallel.modle_parallel"),
])
def test_violations_are_one_sentence_naming_keys_and_numbers(parallel, n, model, message):
    with pytest.raises(ParallelConfigError) as info:
        validate_parallel_config(parallel, n, model)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_valid_config_is_normalised_with_derived_data_parallel():
    p = validate_parallel_config({"parallel_mode": "semi_auto_parallel", "model_parallel": 2,
                                  "pipeline_stages": 2, "micro_batch_num": 4}, 8, GPT)
    assert (p["data_parallel"], p["model_parallel"], p["pipeline_stages"]) == (2, 2, 2)


def test_context_rejects_unknown_keys_and_values():
    reset_auto_parallel_context()
    with pytest.raises(ParallelConfigError, match="unknown auto parallel context key 'paralel_mode'"):
        set_auto_parallel_context(paralel_mode="data_parallel")
    with pytest.raises(ParallelConfigError, match="pipeline_stages must be a positive integer"):
        set_auto_parallel_context(pipeline_stages=0)
    set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=False)
    assert get_auto_parallel_context("parallel_mode") == "data_parallel"
    assert get_auto_parallel_context("device_num") == 1
    reset_auto_parallel_context()
    assert get_auto_parallel_context("gradients_mean") is True


def test_dataset_shards_follow_the_data_parallel_replicas():
    reset_auto_parallel_context()
    assert data_shard() is None
    set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=5, model_parallel=2)
    assert data_shard() == (4, 2)  # rank 5 = replica 2, model-parallel slice 1
    set_auto_parallel_context(full_batch=True)
    assert data_shard() == (1, 0)
    reset_auto_parallel_context()


def test_auto_parallel_takes_the_searched_layout():
    from mstrain.parallel.config import _searched_layout
    model = {"n_layer": 24, "n_embd": 2048, "n_head": 16, "vocab_size": 50304, "block_size": 1024}
    chosen = _searched_layout({"parallel_mode": "auto_parallel", "search_mode": "dynamic_programming",
                               "memory_limit_gb": 16}, model, {"train": {"batch_size": 8}}, 64)
    assert chosen["data_parallel"] * chosen["model_parallel"] * chosen["pipeline_stages"] == 64
    validate_parallel_config(chosen, 64, model)  # the search only proposes valid layouts
    kept = _searched_layout({"parallel_mode": "auto_parallel", "search_mode": "dynamic_programming",
                             "model_parallel": 2}, model, None, 64)
    assert kept["model_parallel"] == 2 and "pipeline_stages" not in kept  # a degree given by the user wins
