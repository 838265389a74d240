"""Config schema of the GPT job and the MindFormers-style layout blocks, checked before any weight exists.

    parallel_config: {data_parallel: 1, model_parallel: 1, pipeline_stage: 1, micro_batch_num: 1,
                      optimizer_shard: false}
    recompute_config: {recompute: false}

`check_parallel_layout(cfg, ranks)` raises ParallelConfigError with one line naming the key of the
first violation (degrees whose product is not the rank count, heads / ffn / padded vocabulary not
divisible by model_parallel, layers not divisible by pipeline_stage, batch not divisible by
data_parallel x micro_batch_num).

`parallel_config: auto` (`parallel_config=auto` on the command line) lets core's strategy search
pick the layout for the rank count and the model: `search_layout(cfg, ranks, padded_vocab)` for GPT,
`resolve_auto_layout` for any job (the ViT and T5 jobs use it with the splits they support).
"""
from dataclasses import dataclass, fields, replace
from typing import Literal, Optional, Union

from mstrain.config import OptimizerConfig, option, section
from mstrain.errors import ParallelConfigError

__all__ = ["ParallelLayout", "RecomputeConfig", "GPTModelConfig", "GPTTrain", "TextData", "GPTJobConfig",
           "check_parallel_layout", "search_layout", "resolve_auto_layout", "describe_layout",
           "announce_layout"]


@dataclass
class ParallelLayout:
    """How the ranks of `mpiexec -n N` split the model (MindFormers' parallel_config)."""
    data_parallel: int = option(1, "data-parallel replicas; each reads batch_size / data_parallel rows", low=1)
    model_parallel: int = option(1, "tensor-parallel degree: heads, MLP units and vocabulary split over ranks "
                                    "(Megatron layers)", low=1)
    pipeline_stage: int = option(1, "pipeline stages: blocks split in order, 1F1B schedule, tied embedding "
                                    "copies kept equal", low=1)
    micro_batch_num: int = option(1, "micro-batches per step (the pipeline's; with one stage: gradient "
                                     "accumulation)", low=1)
    optimizer_shard: bool = option(False, "shard the optimizer state over the data-parallel ranks (ZeRO-1)")


@dataclass
class RecomputeConfig:
    """Activation recomputation (MindFormers' recompute_config)."""
    recompute: bool = option(False, "recompute each transformer block's activations in backward (less memory, "
                                    "one more forward)")


@dataclass
class GPTModelConfig:
    """GPT shape (pre-LN, GELU MLP, learned positions, tied embedding)."""
    num_layers: int = option(4, "transformer blocks", low=1)
    num_heads: int = option(4, "attention heads", low=1)
    hidden_size: int = option(256, "model width", low=1)
    seq_length: int = option(128, "context length (learned positions)", low=2)
    ffn_hidden_size: int = option(0, "MLP hidden units; 0 = 4 * hidden_size", low=0)
    vocab_pad_multiple: int = option(8, "pad the vocabulary to a multiple of this so it splits over "
                                        "model-parallel ranks (padded logits are masked)", low=1)
    init_std: float = option(0.02, "std of the N(0, std) weight initialisation (GPT-2)", low=0.0)
    layernorm_epsilon: float = option(1e-5, "LayerNorm epsilon", low=0.0)


@dataclass
class GPTTrain:
    """Steps, batches, sinking, evaluation, outputs."""
    steps: int = option(300, "training steps", low=1)
    batch_size: int = option(16, "global batch (sequences per step, over all data-parallel ranks)", low=1)
    seed: int = option(0, "seed of the weights and of the batch sampler (W1: same batches as the peer)", low=0)
    dataset_sink_mode: bool = option(True, "run sink_size steps per host round trip as one compiled graph "
                                           "(model_parallel 1, micro_batch_num 1)")
    sink_size: int = option(50, "steps per sink (and per progress line)", low=1)
    eval_every: int = option(100, "steps between validation losses (rounded to sinks); 0 = at the end only",
                             low=0)
    eval_windows: int = option(0, "validation windows evaluated; 0 = every window of the validation text", low=0)
    checkpoint_every: int = option(0, "steps between checkpoints (rounded to sinks); 0 = at the end only", low=0)
    output_dir: str = option("outputs/gpt_char", "directory for checkpoints, history.json, loss_curve.png, "
                                                 "tokenizer.json")


@dataclass
class TextData:
    """The training text: first 90% train, last 10% validation."""
    path: str = option("data/text/tinyshakespeare.txt", "UTF-8 text file, relative to cwd or the repo root")


@dataclass
class GPTJobConfig:
    """Config of the gpt_char job."""
    job: str = option("", "the registered job this config runs (mstrain list shows them)")
    run_mode: str = option("train", "train from scratch, finetune from load_checkpoint, eval (val loss and "
                                    "perplexity) or predict (generate from prompt)",
                           choices=("train", "finetune", "eval", "predict"))
    load_checkpoint: Optional[str] = option(None, "checkpoint to start from (finetune, eval, predict)")
    prompt: str = option("ROMEO:", "predict: text the generation continues")
    max_new_tokens: int = option(200, "predict: characters to generate", low=0)
    do_sample: bool = option(True, "predict: sample (else greedy)")
    temperature: float = option(0.8, "predict: softmax temperature", low=1e-6)
    top_k: int = option(0, "predict: sample among the k likeliest; 0 = all", low=0)
    top_p: float = option(1.0, "predict: nucleus sampling mass; 1 = off", low=1e-6, high=1.0)
    model: GPTModelConfig = section(GPTModelConfig)
    train: GPTTrain = section(GPTTrain)
    optimizer: OptimizerConfig = section(OptimizerConfig)
    data: TextData = section(TextData)
    parallel_config: Union[Literal["auto"], ParallelLayout] = section(
        ParallelLayout, "how the ranks split the model (data_parallel, model_parallel, pipeline_stage, micro_batch_num, "
                        "optimizer_shard), or auto: the strategy search picks them for the ranks and the model")
    recompute_config: RecomputeConfig = section(RecomputeConfig)


def check_parallel_layout(cfg, ranks, padded_vocab):
    """Raise ParallelConfigError naming the first key whose value does not fit `ranks`."""
    p, m = cfg.parallel_config, cfg.model
    dp, mp, pp, micro = p.data_parallel, p.model_parallel, p.pipeline_stage, p.micro_batch_num
    if dp * mp * pp != ranks:
        raise ParallelConfigError(f"parallel_config.data_parallel ({dp}) x parallel_config.model_parallel ({mp}) x "
                                  f"parallel_config.pipeline_stage ({pp}) = {dp * mp * pp} must equal the number "
                                  f"of ranks ({ranks})")
    ffn = m.ffn_hidden_size or 4 * m.hidden_size
    for key, value, degree, degree_key in (("model.num_heads", m.num_heads, mp, "model_parallel"),
                                           ("model.ffn_hidden_size", ffn, mp, "model_parallel"),
                                           ("model.vocab_pad_multiple", padded_vocab, mp, "model_parallel"),
                                           ("model.num_layers", m.num_layers, pp, "pipeline_stage")):
        if value % degree:
            raise ParallelConfigError(f"{key}: {value} is not divisible by parallel_config.{degree_key} ({degree})")
    if m.hidden_size % m.num_heads:
        raise ParallelConfigError(f"model.hidden_size: {m.hidden_size} is not divisible by model.num_heads "
                                  f"({m.num_heads})")
    if pp > 1 and micro < pp:
        raise ParallelConfigError(f"parallel_config.micro_batch_num ({micro}) must be at least "
                                  f"parallel_config.pipeline_stage ({pp})")
    if cfg.train.batch_size % (dp * micro):
        raise ParallelConfigError(f"train.batch_size: {cfg.train.batch_size} is not divisible by "
                                  f"parallel_config.data_parallel ({dp}) x parallel_config.micro_batch_num ({micro})")


def resolve_auto_layout(cfg, spec, ranks, make_layout, max_model_parallel=None, max_pipeline_stages=None):
    """`cfg` with parallel_config=auto replaced by the layout core's strategy search predicts fastest for
    `spec` on `ranks` within the memory per rank (recompute on when the search needs it), and the
    search's best Candidate. `make_layout(candidate)` builds the job's parallel_config block; the
    max_* limits keep the search to the splits the job supports. Rank 0's choice is everyone's, so a
    per-rank hardware profile cannot split them."""
    from mstrain import communication as comm
    from mstrain.communication.transport import broadcast_object
    from mstrain.parallel.search import search
    best = None
    if comm.get_rank() == 0:
        try:
            best = search(spec, ranks, max_model_parallel=max_model_parallel,
                          max_pipeline_stages=max_pipeline_stages)[0]
        except ParallelConfigError as exc:  # every rank raises it, none waits for a layout
            best = str(exc)
    best = broadcast_object(best)
    if isinstance(best, str):
        raise ParallelConfigError(best, key="parallel_config")
    recompute = replace(cfg.recompute_config, recompute=cfg.recompute_config.recompute or best.recompute)
    return replace(cfg, parallel_config=make_layout(best), recompute_config=recompute), best


def search_layout(cfg, ranks, padded_vocab):
    """GPT's parallel_config=auto: `resolve_auto_layout` over every data x model x pipeline split."""
    from mstrain.parallel.cost_model import TransformerSpec
    m = cfg.model
    spec = TransformerSpec(num_layers=m.num_layers, hidden_size=m.hidden_size, num_heads=m.num_heads,
                           vocab_size=padded_vocab, seq_length=m.seq_length, batch_size=cfg.train.batch_size,
                           ffn_hidden_size=m.ffn_hidden_size)
    return resolve_auto_layout(cfg, spec, ranks, lambda best: ParallelLayout(
        data_parallel=best.dp, model_parallel=best.mp, pipeline_stage=best.pp,
        micro_batch_num=best.micro_batch_num, optimizer_shard=best.optimizer_shard))


def describe_layout(cfg):
    """One line: the layout's keys as a user would set them."""
    values = [(f"parallel_config.{f.name}", getattr(cfg.parallel_config, f.name))
              for f in fields(cfg.parallel_config)]
    values.append(("recompute_config.recompute", cfg.recompute_config.recompute))
    return " ".join(f"{key}={str(value).lower() if isinstance(value, bool) else value}" for key, value in values)


def announce_layout(cfg, best):
    """Print the chosen layout once (rank 0), as parallel_config=auto promises."""
    from mstrain.log import is_main_process
    if is_main_process():
        print(f"parallel_config=auto chose: {describe_layout(cfg)} (predicted {best.step_time:.4g} s/step, "
              f"{best.memory / 2 ** 20:.1f} MiB/rank)", flush=True)
