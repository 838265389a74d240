"""Generation: the KV cache gives the same tokens as recomputing, sampling is seeded, filters."""
import numpy as np
import pytest

import mstrain as ms
from mstrain.transformer import GPT, CharTokenizer, GPTConfig, KVCache, pipeline
from mstrain.transformer.generation import filter_logits


@pytest.fixture(scope="module")
def net():
    ms.set_seed(1)  # a wide initialisation: the greedy continuation is not one repeated token
    return GPT(GPTConfig(vocab_size=11, num_layers=2, num_heads=2, hidden_size=16, seq_length=16, init_std=0.5))


def test_greedy_identical_with_and_without_cache(net):
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    cached = net.generate(prompt, 40, use_cache=True)  # 43 > seq_length: the context restarts twice
    plain = net.generate(prompt, 40, use_cache=False)
    assert cached.shape == (2, 43)
    np.testing.assert_array_equal(cached, plain)
    np.testing.assert_array_equal(cached[:, :3], prompt)
    assert len(set(cached[0, 3:].tolist())) > 2


def test_cached_logits_equal_full_forward(net):
    ids = np.random.default_rng(0).integers(0, 11, (1, 9))
    layers, heads, head_dim = net.cache_shape()
    cache = KVCache(layers, 1, heads, 16, head_dim)
    keys_buffer = cache.keys
    net.next_token_logits(ids[:, :5], cache)
    for t in range(5, 9):
        step = net.next_token_logits(ids[:, t:t + 1], cache)
        full = net.next_token_logits(ids[:, :t + 1])
        np.testing.assert_allclose(step, full, rtol=1e-5, atol=1e-5)
    assert cache.keys is keys_buffer and cache.length == 9  # written in place, never reallocated


def test_sampling_is_seeded(net):
    prompt = np.array([3, 1])
    a = net.generate(prompt, 20, do_sample=True, temperature=1.5, seed=7)
    b = net.generate(prompt, 20, do_sample=True, temperature=1.5, seed=7)
    c = net.generate(prompt, 20, do_sample=True, temperature=1.5, seed=8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    ms.set_seed(5)
    d = net.generate(prompt, 20, do_sample=True, temperature=1.5)
    ms.set_seed(5)
    np.testing.assert_array_equal(d, net.generate(prompt, 20, do_sample=True, temperature=1.5))
    greedy = net.generate(prompt, 20)
    np.testing.assert_array_equal(net.generate(prompt, 20, do_sample=True, top_k=1, seed=3), greedy)


def test_filters():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    np.testing.assert_array_equal(np.isfinite(filter_logits(logits, top_k=2)), [[True, True, False, False]])
    np.testing.assert_array_equal(np.isfinite(filter_logits(logits, top_p=0.7)), [[True, True, False, False]])
    np.testing.assert_array_equal(np.isfinite(filter_logits(logits, top_p=0.5)), [[True, False, False, False]])
    np.testing.assert_array_equal(np.isfinite(filter_logits(logits, top_p=0.81)), [[True, True, True, False]])


def test_bad_arguments(net):
    with pytest.raises(ValueError, match="temperature"):
        net.generate([1], 3, do_sample=True, temperature=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        net.generate([1], -1)


def test_text_generation_pipeline(net):
    tok = CharTokenizer("abcdefghijk")
    gen = pipeline("text_generation", model=net, tokenizer=tok)
    out = gen("abc", max_new_tokens=10)
    want = tok.decode(net.generate(tok.encode("abc"), 10))
    assert out == [{"generated_text": want}] and want.startswith("abc") and len(want) == 13
    with pytest.raises(ValueError, match="unknown task"):
        pipeline("translation", model=net, tokenizer=tok)
