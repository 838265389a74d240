"""The `parallel:` config section: checked before any rank starts working, and the same on every rank.

`validate_parallel_config(parallel, device_num, model)` raises ParallelConfigError with one
sentence naming the keys and numbers of the first violation:

    parallel.data_parallel (2) x parallel.model_parallel (2) x parallel.pipeline_stages (2) = 8
    must equal the number of ranks (4)

`init_parallel(parallel, model, full_config)` is what a job calls at start-up: it initialises
communication, checks every rank was given the same config (a mismatch names the rank and the
key), takes the strategy search's layout under auto_parallel (search_mode dynamic_programming,
no degrees given), validates, sets the auto parallel context and returns the `ParallelGroups`.
"""
import json

from ..errors import ParallelConfigError
from .context import PARALLEL_MODES, SEARCH_MODES, set_auto_parallel_context

PARALLEL_KEYS = {
    "parallel_mode": "stand_alone", "data_parallel": None, "model_parallel": 1, "pipeline_stages": 1,
    "micro_batch_num": 1, "gradients_mean": True, "enable_parallel_optimizer": False,
    "search_mode": "sharding_propagation", "full_batch": False, "grad_bucket_size_mb": 25.0,
    "recompute": False, "memory_limit_gb": None, "strategy_ckpt_save_file": "", "strategy_ckpt_load_file": "",
}

# model keys and the names kits use for them
_MODEL_ALIASES = {
    "num_heads": ("num_heads", "n_head", "num_attention_heads", "heads"),
    "hidden_size": ("hidden_size", "n_embd", "d_model", "embed_dim", "dim"),
    "vocab_size": ("vocab_size", "n_vocab"),
    "num_layers": ("num_layers", "n_layer", "depth", "num_hidden_layers"),
    "ffn_hidden_size": ("ffn_hidden_size", "d_ff", "intermediate_size", "mlp_dim"),
    "batch_size": ("batch_size", "global_batch_size"),
}


def model_value(model, key, prefix="model"):
    """(config key, value) of a model dimension under any of its kit spellings, or (None, None)."""
    for name in _MODEL_ALIASES[key]:
        if model and name in model and model[name] is not None:
            return f"{prefix}.{name}", int(model[name])
    return None, None


def _positive_int(parallel, key):
    value = parallel.get(key, PARALLEL_KEYS[key])
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParallelConfigError(f"parallel.{key} must be a positive integer, got {value!r}")
    return value


def normalize(parallel, device_num):
    """The section with defaults filled in and data_parallel derived when absent; unknown keys rejected."""
    parallel = dict(parallel or {})
    unknown = sorted(set(parallel) - set(PARALLEL_KEYS))
    if unknown:
        raise ParallelConfigError(f"unknown key parallel.{unknown[0]}; known: {', '.join(sorted(PARALLEL_KEYS))}")
    full = {**PARALLEL_KEYS, **parallel}
    if full["parallel_mode"] not in PARALLEL_MODES:
        raise ParallelConfigError(f"parallel.parallel_mode={full['parallel_mode']!r} is not one of {', '.join(PARALLEL_MODES)}")
    if full["search_mode"] not in SEARCH_MODES:
        raise ParallelConfigError(f"parallel.search_mode={full['search_mode']!r} is not one of {', '.join(SEARCH_MODES)}")
    mp, pp = _positive_int(full, "model_parallel"), _positive_int(full, "pipeline_stages")
    _positive_int(full, "micro_batch_num")
    if full["data_parallel"] is None:
        full["data_parallel"] = max(device_num // (mp * pp), 1)
    _positive_int(full, "data_parallel")
    return full


def validate_parallel_config(parallel, device_num, model=None):
    """Check a `parallel:` section against the number of ranks and the model's dimensions.

    Returns the normalised section; raises ParallelConfigError naming keys and numbers.
    """
    p = normalize(parallel, device_num)
    dp, mp, pp, micro = p["data_parallel"], p["model_parallel"], p["pipeline_stages"], p["micro_batch_num"]
    if dp * mp * pp != device_num:
        raise ParallelConfigError(
            f"parallel.data_parallel ({dp}) x parallel.model_parallel ({mp}) x parallel.pipeline_stages ({pp}) "
            f"= {dp * mp * pp} must equal the number of ranks ({device_num})")
    if p["parallel_mode"] == "data_parallel" and (mp > 1 or pp > 1):
        raise ParallelConfigError(f"parallel.parallel_mode is data_parallel but parallel.model_parallel ({mp}) or "
                                  f"parallel.pipeline_stages ({pp}) is above 1; use semi_auto_parallel or hybrid_parallel")
    if pp > 1 and micro < pp:
        raise ParallelConfigError(f"parallel.micro_batch_num ({micro}) must be at least parallel.pipeline_stages ({pp})")
    for key, degree, degree_key in (("num_heads", mp, "model_parallel"), ("hidden_size", mp, "model_parallel"),
                                    ("vocab_size", mp, "model_parallel"), ("ffn_hidden_size", mp, "model_parallel"),
                                    ("num_layers", pp, "pipeline_stages")):
        name, value = model_value(model, key)
        if name is not None and value % degree:
            raise ParallelConfigError(f"{name} ({value}) must be divisible by parallel.{degree_key} ({degree})")
    name, batch = model_value(model, "batch_size")
    if name is not None and batch % (dp * micro):
        raise ParallelConfigError(f"{name} ({batch}) must be divisible by parallel.data_parallel ({dp}) x "
                                  f"parallel.micro_batch_num ({micro}) = {dp * micro}")
    return p


def check_same_config(config, what="config"):
    """Raise on every rank when the ranks were not all given the same `config` (a JSON-able dict)."""
    from ..communication import all_gather_object
    text = json.dumps(config, sort_keys=True, default=str)
    texts = all_gather_object(text)
    for rank, other in enumerate(texts):
        if other != texts[0]:
            key, mine, theirs = _first_difference(json.loads(texts[0]), json.loads(other))
            raise ParallelConfigError(f"rank {rank} was started with {key}={theirs!r} but rank 0 with {key}={mine!r}: "
                                      f"every rank must get the same {what}")


def _first_difference(a, b, prefix=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key, "<missing>") != b.get(key, "<missing>"):
                return _first_difference(a.get(key, "<missing>"), b.get(key, "<missing>"), f"{prefix}{key}.")
    return prefix.rstrip(".") or "<root>", a, b


_SEQ_KEYS = ("seq_length", "block_size", "seq_len", "max_position_embeddings", "n_ctx")


def transformer_spec(model, global_batch):
    """A `cost_model.TransformerSpec` from a model section, or None when it does not describe one."""
    from .cost_model import TransformerSpec
    values = {k: model_value(model, k)[1] for k in ("num_layers", "hidden_size", "num_heads", "vocab_size")}
    seq = next((int(model[k]) for k in _SEQ_KEYS if model and model.get(k) is not None), None)
    if any(v is None for v in values.values()) or seq is None:
        return None
    dtype = str(model.get("compute_dtype", model.get("dtype", "float32")))
    return TransformerSpec(values["num_layers"], values["hidden_size"], values["num_heads"], values["vocab_size"],
                           seq, int(global_batch), model_value(model, "ffn_hidden_size")[1] or 0,
                           2 if "16" in dtype else 4)


def _searched_layout(parallel, model, full_config, n):
    """auto_parallel with dynamic_programming and no fixed degrees: take the search's layout."""
    p = dict(parallel or {})
    fixed = any(p.get(k) not in (None, 1) for k in ("data_parallel", "model_parallel", "pipeline_stages"))
    if p.get("parallel_mode") != "auto_parallel" or p.get("search_mode", "sharding_propagation") == \
            "sharding_propagation" or fixed or n == 1:
        return p
    per_rank = ((full_config or {}).get("train") or {}).get("batch_size") or (model or {}).get("batch_size") or 1
    spec = transformer_spec(model, int(per_rank) * n)
    if spec is None:
        return p
    from .calibrate import load_hardware
    from .search import search
    limit = p.get("memory_limit_gb")
    best, _, _ = search(spec, n, load_hardware(memory=limit * 2 ** 30 if limit else None))
    p.update(best.layout())
    return p


def init_parallel(parallel=None, model=None, full_config=None):
    """Start-up of a parallel job: init communication, validate, cross-check, set the context.

    Returns the `ParallelGroups` of this rank.
    """
    from .. import communication as comm
    from .context import parallel_groups
    comm.init()
    n = comm.get_group_size()
    check_same_config(full_config if full_config is not None else {"parallel": parallel, "model": model})
    p = validate_parallel_config(_searched_layout(parallel, model, full_config, n), n, model)
    context = {k: p[k] for k in ("parallel_mode", "pipeline_stages", "micro_batch_num", "model_parallel",
                                 "gradients_mean", "enable_parallel_optimizer", "search_mode", "full_batch",
                                 "grad_bucket_size_mb", "recompute", "memory_limit_gb",
                                 "strategy_ckpt_save_file", "strategy_ckpt_load_file")}
    set_auto_parallel_context(device_num=n, **context)
    return parallel_groups()
