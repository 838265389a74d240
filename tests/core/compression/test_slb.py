import numpy as np
import pytest

import mstrain as ms
from mstrain import Model, Tensor, nn
from mstrain import dataset as ds
from mstrain.compression import (Int8Dense, SlbConfig, SlbLayer, SlbQuantAwareTraining, load_quantized, model_bytes,
                                 slb_values)
from mstrain.compression.int8 import pack_codes, unpack_codes
from mstrain.jobs.lenet_mnist import LeNet5


def _mnist(n):
    data = np.load("data/images/mnist/mnist_test10k.npz")
    return (data["x"][:n].reshape(-1, 1, 28, 28) / 255.0).astype(np.float32), data["y"][:n].astype(np.int32)


def test_values_and_initial_hard_weights_are_the_nearest_levels():
    np.testing.assert_allclose(slb_values(1), [-1, 1])
    np.testing.assert_allclose(slb_values(2), [-1, -1 / 3, 1 / 3, 1])
    dense = nn.Dense(6, 3)
    w = dense.weight.asnumpy().copy()
    layer = SlbLayer(dense, weight_bits=2, act_bits=8, ema_decay=0.9).set_train(False)
    scale = np.abs(w).max(axis=1, keepdims=True)
    values = slb_values(2)
    nearest = values[np.abs(w[..., None] / scale[..., None] - values).argmin(-1)] * scale
    np.testing.assert_allclose(layer.weight().asnumpy(), nearest, rtol=1e-6)
    layer.set_train(True)
    layer.temperature.set_data(Tensor(np.float32(1e-5)))  # cold: the soft weights are the hard ones
    np.testing.assert_allclose(layer.weight().asnumpy(), nearest, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bits,step,offset", [(1, 2, 1), (2, 2, 3), (4, 2, 15), (4, 1, 7), (3, 1, 3)])
def test_pack_codes_round_trip(bits, step, offset):
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 2 ** bits if step == 2 else 2 ** bits - 1, size=(5, 7))
    q = (codes * step - offset).astype(np.int8)
    packed = pack_codes(q, bits, step, offset)
    assert packed.dtype == np.uint8 and packed.size == -(-q.size * bits // 8)
    np.testing.assert_array_equal(unpack_codes(packed, q.shape, bits, step, offset), q)


def test_sink_search_schedule_and_packed_integer_network(tmp_path):
    ms.set_seed(0)
    x, y = _mnist(256)
    algo = SlbQuantAwareTraining(SlbConfig(weight_bits=1, act_bits=6, t_start=1.0, t_end=0.1, total_steps=4,
                                           exclude=["conv1"]))
    net = algo.apply(LeNet5())
    assert isinstance(net.fc1, SlbLayer) and isinstance(net.conv1, nn.Conv2d)
    before = net.fc1.logits.asnumpy().copy()
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(64)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Adam(net.trainable_params(), 1e-2))
    model.train(2, data, callbacks=algo.callbacks(), dataset_sink_mode=True, sink_size=2)
    assert float(net.fc1.temperature.asnumpy()) == pytest.approx(0.1, rel=1e-6)
    assert not np.allclose(net.fc1.logits.asnumpy(), before)
    net.set_train(False)
    searched = net(Tensor(x[:50])).asnumpy()
    int8 = algo.convert(net, save_path=tmp_path / "slb.npz")
    assert isinstance(int8.fc1, Int8Dense) and set(np.unique(int8.fc1.weight_q)) <= {-1, 1}
    np.testing.assert_allclose(int8(Tensor(x[:50])).asnumpy(), searched, atol=1e-4)
    # 1-bit weights are stored at 1 bit: the file is far below the float parameters
    float_bytes = sum(p.asnumpy().nbytes for p in LeNet5().get_parameters())
    assert model_bytes(int8) < float_bytes / 8
    copy = algo.convert(net)
    copy.fc1.weight_q[...] = 0
    load_quantized(copy, tmp_path / "slb.npz")
    np.testing.assert_array_equal(copy.fc1.weight_q, int8.fc1.weight_q)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="weight_bits"):
        SlbQuantAwareTraining(SlbConfig(weight_bits=3))
    with pytest.raises(ValueError, match="t_start > t_end"):
        SlbQuantAwareTraining({"t_start": 0.1, "t_end": 1.0})
