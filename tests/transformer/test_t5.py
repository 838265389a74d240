"""T5: relative position buckets, RMSNorm, causal decoder over a bidirectional encoder, KV-cached
greedy decoding equal to recomputation, seeded sampling."""
import math

import numpy as np
import pytest

import mstrain as ms
from mstrain import Tensor
from mstrain.transformer import RMSNorm
from mstrain.transformer.t5 import T5, T5Config, relative_position_bucket


def _bucket(relative, bidirectional, num_buckets=32, max_distance=128):
    """T5's reference rule, one scalar at a time."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        bucket += num_buckets if relative > 0 else 0
        n = abs(relative)
    else:
        n = max(-relative, 0)
    exact = num_buckets // 2
    if n < exact:
        return bucket + n
    large = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return bucket + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_match_the_reference_rule(bidirectional):
    relative = np.arange(-300, 301)
    got = relative_position_bucket(relative, bidirectional, 32, 128)
    np.testing.assert_array_equal(got, [_bucket(int(r), bidirectional) for r in relative])


def test_rms_norm():
    norm = RMSNorm(6, epsilon=1e-6)
    norm.weight.set_data(np.arange(1, 7, dtype=np.float32))
    x = np.random.default_rng(0).standard_normal((2, 3, 6)).astype(np.float32)
    want = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * np.arange(1, 7)
    np.testing.assert_allclose(norm(Tensor(x)).asnumpy(), want, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def net():
    ms.set_seed(0)
    model = T5(T5Config(vocab_size=20, hidden_size=16, num_layers=2, num_heads=2, ffn_hidden_size=32,
                        max_decode_length=24))
    rng = np.random.default_rng(1)
    for p in model.trainable_params():  # wider weights: untrained greedy outputs are not constant
        if len(p.shape) == 2:
            p.set_data(rng.normal(0, 0.6, p.shape).astype(np.float32))
    assert not [name for name, _ in model.parameters_and_names() if name.endswith(".bias")]  # T5 has no biases
    return model


@pytest.mark.parametrize("stack,bidirectional,offset", [("encoder_bias", True, 0), ("decoder_bias", False, 3)])
def test_position_bias_is_the_table_row_of_each_bucket_per_head(net, stack, bidirectional, offset):
    table = getattr(net, stack).table.embedding_table.asnumpy()  # (buckets, heads)
    got = getattr(net, stack)(5, 8, offset).asnumpy()           # (heads, T, S)
    relative = np.arange(8)[None, :] - (np.arange(5)[:, None] + offset)
    buckets = relative_position_bucket(relative, bidirectional, 32, 128)
    np.testing.assert_array_equal(got, np.transpose(table[buckets], (2, 0, 1)))


def test_decoder_causal_encoder_bidirectional(net):
    rng = np.random.default_rng(2)
    src, dec = rng.integers(2, 20, (1, 7)).astype(np.int32), rng.integers(2, 20, (1, 6)).astype(np.int32)
    base = net(Tensor(src), Tensor(dec)).asnumpy()
    later = dec.copy()
    later[0, 4:] = (later[0, 4:] + 3) % 20
    np.testing.assert_allclose(net(Tensor(src), Tensor(later)).asnumpy()[:, :4], base[:, :4], atol=1e-6)
    last_source = src.copy()
    last_source[0, -1] = (last_source[0, -1] + 3) % 20
    assert np.abs(net(Tensor(last_source), Tensor(dec)).asnumpy()[:, 0] - base[:, 0]).max() > 1e-4


def test_greedy_identical_with_and_without_cache(net):
    src = np.random.default_rng(3).integers(2, 20, (3, 9))
    cached, plain = net.generate(src, 15, use_cache=True), net.generate(src, 15, use_cache=False)
    assert cached.shape == (3, 16) and (cached[:, 0] == 0).all()
    np.testing.assert_array_equal(cached, plain)
    assert len(set(cached[:, 1:].ravel().tolist())) > 3


def test_sampling_is_seeded(net):
    src = np.array([[3, 4, 5, 6]])
    a = net.generate(src, 10, do_sample=True, seed=4)
    np.testing.assert_array_equal(a, net.generate(src, 10, do_sample=True, seed=4))
    assert not np.array_equal(a, net.generate(src, 10, do_sample=True, seed=5))
    with pytest.raises(ValueError, match="max_decode_length"):
        net.generate(src, 30)
