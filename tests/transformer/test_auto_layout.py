"""parallel_config=auto: core's strategy search picks the gpt_char layout for the ranks and the model;
the layout it picks is one the job accepts, and a model no layout of the ranks fits is refused naming
the sizes."""
import pytest

from mstrain.config import load_job_config
from mstrain.errors import ParallelConfigError
from mstrain.parallel.cost_model import TransformerSpec
from mstrain.parallel.search import search
from mstrain.transformer.config import ParallelLayout, check_parallel_layout, describe_layout, search_layout

from ._run import ROOT

PADDED_VOCAB = 72  # 65 characters padded to a multiple of 8


def _config(*overrides):
    return load_job_config(str(ROOT / "configs" / "gpt_char.yaml"), list(overrides)).cfg


def test_config_accepts_auto_and_keeps_explicit_layouts():
    assert _config("parallel_config=auto").parallel_config == "auto"
    explicit = _config("parallel_config.data_parallel=2").parallel_config
    assert isinstance(explicit, ParallelLayout) and explicit.data_parallel == 2


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_search_layout_is_the_search_best_and_fits_the_job(ranks):
    cfg = _config("parallel_config=auto", "train.batch_size=16")
    chosen, best = search_layout(cfg, ranks, PADDED_VOCAB)
    m = cfg.model
    spec = TransformerSpec(m.num_layers, m.hidden_size, m.num_heads, PADDED_VOCAB, m.seq_length, 16)
    expected = search(spec, ranks)[0]
    p = chosen.parallel_config
    assert (p.data_parallel, p.model_parallel, p.pipeline_stage, p.micro_batch_num, p.optimizer_shard) == \
        (expected.dp, expected.mp, expected.pp, expected.micro_batch_num, expected.optimizer_shard)
    assert chosen.recompute_config.recompute == expected.recompute and best.step_time == expected.step_time
    check_parallel_layout(chosen, ranks, PADDED_VOCAB)  # raises when the job would refuse it
    assert describe_layout(chosen).startswith(f"parallel_config.data_parallel={p.data_parallel} ")


def test_no_layout_of_the_ranks_fits():
    # batch 3 splits over no 2 replicas, 3 heads over no 2 ranks, 3 layers over no 2 stages
    cfg = _config("parallel_config=auto", "train.batch_size=3", "model.num_heads=3", "model.hidden_size=48",
                  "model.num_layers=3")
    with pytest.raises(ParallelConfigError, match="no data x model x pipeline layout of 2 ranks"):
        search_layout(cfg, 2, PADDED_VOCAB)


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_search_limits_keep_to_the_splits_a_job_runs(ranks):
    spec = TransformerSpec(num_layers=4, hidden_size=128, num_heads=4, vocab_size=0, seq_length=50, batch_size=64,
                           ffn_hidden_size=256)
    unlimited = search(spec, ranks)[1]
    no_pipeline = search(spec, ranks, max_pipeline_stages=1)[1]
    data_only = search(spec, ranks, max_model_parallel=1, max_pipeline_stages=1)[1]
    assert {c.pp for c in no_pipeline} == {1} and {(c.mp, c.pp) for c in data_only} == {(1, 1)}
    assert {c.mp for c in no_pipeline} == {c.mp for c in unlimited if c.pp == 1}  # nothing else is dropped
    assert len(data_only) < len(no_pipeline) < len(unlimited)


def test_a_limit_no_layout_meets_names_it():
    spec = TransformerSpec(num_layers=4, hidden_size=128, num_heads=4, vocab_size=0, seq_length=50, batch_size=3)
    with pytest.raises(ParallelConfigError, match="model_parallel at most 1, pipeline_stages at most 1"):
        search(spec, 2, max_model_parallel=1, max_pipeline_stages=1)


@pytest.mark.parametrize("job, keys", [("vit_mnist", {"data_parallel", "model_parallel", "optimizer_shard"}),
                                       ("t5_copy", {"data_parallel", "optimizer_shard"})])
def test_vit_and_t5_accept_auto_and_resolve_to_their_own_layout(job, keys):
    import dataclasses
    from mstrain.transformer import t5_jobs, vit_jobs
    cfg = load_job_config(str(ROOT / "configs" / f"{job}.yaml"), ["parallel_config=auto"]).cfg
    assert cfg.parallel_config == "auto"
    chosen = (vit_jobs if job == "vit_mnist" else t5_jobs)._resolve_auto(cfg)
    assert {f.name for f in dataclasses.fields(chosen.parallel_config)} == keys
    assert chosen.parallel_config.data_parallel == 1  # one process: the search's only layout
