"""Autoregressive generation for decoder models, with a KV cache preallocated to the maximum length.

`model.generate(input_ids, max_new_tokens, do_sample=False, temperature=1.0, top_k=0, top_p=1.0,
use_cache=True, seed=None)` returns (B, T + max_new_tokens) ids. With the cache, each new token
runs the network on one position and attends over the cached keys/values (written in place), so
its cost grows linearly with the length, not quadratically. Without it, every step reruns the
whole context: both give the same logits, hence the same greedy tokens.

A model with learned positions sees at most `seq_length` tokens: when the sequence reaches it, the
context restarts from its last seq_length // 2 tokens (the cache is refilled from them), in both
modes alike. Sampling draws from `numpy.random.default_rng(seed)`, or from mstrain's global
generator (`ms.set_seed`) when seed is None.
"""
import numpy as np

import mstrain as ms
from mstrain.random import default_generator

from .layers import KVCache

__all__ = ["GenerationMixin", "sample_next", "filter_logits", "check_generate_args"]


def filter_logits(logits, top_k=0, top_p=1.0):
    """Logits (B, V) with everything outside the top_k / nucleus top_p set to -inf."""
    logits = np.array(logits, dtype=np.float64)
    if top_k and top_k < logits.shape[-1]:
        kth = np.sort(logits, axis=-1)[:, -top_k][:, None]
        logits = np.where(logits < kth, -np.inf, logits)
    if top_p < 1.0:
        order = np.argsort(-logits, axis=-1)
        sorted_logits = np.take_along_axis(logits, order, -1)
        probs = np.exp(sorted_logits - sorted_logits[:, :1])
        probs /= probs.sum(-1, keepdims=True)
        # keep the smallest prefix whose mass reaches top_p (the first token always stays)
        drop_sorted = np.cumsum(probs, -1) - probs >= top_p
        drop = np.zeros_like(drop_sorted)
        np.put_along_axis(drop, order, drop_sorted, -1)
        logits = np.where(drop, -np.inf, logits)
    return logits


def sample_next(logits, do_sample, temperature, top_k, top_p, rng):
    """(B,) next ids from (B, V) logits: argmax, or a draw from the filtered, tempered softmax."""
    if not do_sample:
        return np.argmax(logits, axis=-1)
    scaled = filter_logits(np.asarray(logits, np.float64) / temperature, top_k, top_p)
    probs = np.exp(scaled - scaled.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    uniform = rng.random((probs.shape[0], 1))
    return np.minimum((np.cumsum(probs, -1) < uniform).sum(-1), probs.shape[-1] - 1)


def check_generate_args(max_new_tokens, temperature, top_k, top_p):
    if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
        raise ValueError(f"generate: max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
    if temperature <= 0:
        raise ValueError(f"generate: temperature must be > 0, got {temperature}")
    if top_k < 0:
        raise ValueError(f"generate: top_k must be >= 0 (0 = off), got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"generate: top_p must be in (0, 1], got {top_p}")


class GenerationMixin:
    """For a Cell with `config.seq_length`, `cache_shape()` -> (layers, heads, head_dim) and
    `next_token_logits(ids, cache=None)` -> (B, V) numpy logits of the last position."""

    def generate(self, input_ids, max_new_tokens=32, do_sample=False, temperature=1.0, top_k=0, top_p=1.0,
                 use_cache=True, seed=None):
        check_generate_args(max_new_tokens, temperature, top_k, top_p)
        ids = np.asarray(input_ids.asnumpy() if hasattr(input_ids, "asnumpy") else input_ids, dtype=np.int64)
        if ids.ndim == 1:
            return self.generate(ids[None], max_new_tokens, do_sample, temperature, top_k, top_p, use_cache, seed)[0]
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise ValueError(f"generate: input_ids must be (batch, length) with length >= 1, got shape {ids.shape}")
        rng = np.random.default_rng(seed) if seed is not None else default_generator()
        window = self.config.seq_length
        start = max(0, ids.shape[1] - window)
        was_training = self.training
        self.set_train(False)
        try:
            with ms.no_grad():
                return self._decode(ids, max_new_tokens, use_cache, start, window, rng,
                                    (do_sample, temperature, top_k, top_p))
        finally:
            self.set_train(was_training)

    def _decode(self, ids, max_new_tokens, use_cache, start, window, rng, sampling):
        cache, fed = None, 0  # fed: tokens of ids already in the cache
        for _ in range(max_new_tokens):
            if ids.shape[1] - start >= window:  # the context is full: keep its last half
                start, cache = ids.shape[1] - window // 2, None
            if not use_cache:
                logits = self.next_token_logits(ids[:, start:])
            else:
                if cache is None:
                    layers, heads, head_dim = self.cache_shape()
                    cache, fed = KVCache(layers, ids.shape[0], heads, window, head_dim), start
                logits = self.next_token_logits(ids[:, fed:], cache)
                fed = ids.shape[1]
            ids = np.concatenate([ids, sample_next(logits, *sampling, rng)[:, None]], axis=1)
        return ids
