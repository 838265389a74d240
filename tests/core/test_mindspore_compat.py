"""What MindSpore code reaches first: import paths and names, lazily-initialised Tensors, the fit /
metrics defaults, amp arguments, and gradients of tuple arguments. Values are checked against numpy."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import dataset as ds
from mstrain import nn
from mstrain.common import initializer as init


@pytest.mark.parametrize("name", ["normal", "uniform", "xavier_uniform", "he_normal", "truncated_normal",
                                  "ones", "zeros", "orthogonal"])
def test_tensor_with_init_is_filled_as_initializer_fills(name):
    ms.set_seed(3)
    lazy = ms.Tensor(shape=(4, 5), dtype=ms.float32, init=name)
    ms.set_seed(3)
    direct = init.initializer(name, (4, 5), ms.float32)
    np.testing.assert_array_equal(lazy.init_data().asnumpy(), direct.asnumpy())


def test_tensor_init_one_gives_ones_not_zeros():
    ones = ms.Tensor(shape=(2, 3), dtype=ms.float32, init=init.One())
    np.testing.assert_array_equal(ones.asnumpy(), np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="not both"):
        ms.Tensor(np.zeros(2), init=init.One())


def test_mindspore_import_paths_and_names():
    from mstrain import EarlyStopping, ParallelMode, ReduceLROnPlateau, context  # noqa: F401
    from mstrain.common import dtype as mstype
    from mstrain.common import mutable  # noqa: F401
    from mstrain.dataset.vision import c_transforms  # noqa: F401
    from mstrain.nn.wrap.cell_wrapper import WithLossCell
    assert WithLossCell is nn.WithLossCell and mstype.float32 == ms.float32
    assert ms.ms_function is ms.jit and nn.Accuracy is ms.train.metrics.Accuracy
    try:
        context.set_auto_parallel_context(parallel_mode=context.ParallelMode.DATA_PARALLEL)
        assert ms.get_auto_parallel_context("parallel_mode") == ParallelMode.DATA_PARALLEL
    finally:
        context.reset_auto_parallel_context()
    with pytest.raises(AttributeError, match="no attribute 'NoSuchMetric'"):
        nn.NoSuchMetric  # noqa: B018


def _data(seed=0, n=96):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 6)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    return x, y


def test_short_metric_names_and_fit_reports_eval_loss():
    ms.set_seed(0)
    x, y = _data()
    net = nn.Dense(6, 2)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = ms.Model(net, loss_fn, nn.SGD(net.trainable_params(), 0.1), metrics={"acc"})
    train = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(32)
    valid = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(96)
    history = model.fit(2, train, valid, callbacks=[ms.EarlyStopping(patience=5)])
    assert set(history.history) >= {"eval_acc", "eval_loss"}
    logits = net(ms.Tensor(x)).asnumpy()
    assert history.history["eval_acc"][-1] == pytest.approx(np.mean(logits.argmax(1) == y))
    shifted = logits - logits.max(1, keepdims=True)
    reference = np.mean(np.log(np.exp(shifted).sum(1)) - shifted[np.arange(len(y)), y])
    assert history.history["eval_loss"][-1] == pytest.approx(reference, rel=1e-5)
    assert set(model.eval(valid)) == {"acc"}  # the extra loss belongs to fit's validation only


def test_amp_auto_and_model_amp_kwargs():
    net = nn.Dense(6, 2)
    model = ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1), amp_level="auto",
                     keep_batchnorm_fp32=False)
    assert model.train_network is not None and net.weight.dtype == ms.float32  # auto is O0 on the CPU
    half = nn.Dense(6, 2)
    ms.Model(half, nn.MSELoss(), nn.SGD(half.trainable_params(), 0.1), amp_level="O3",
             cast_model_type=ms.float16)
    assert half(ms.Tensor(np.ones((1, 6), np.float32))).dtype == ms.float32  # O3 casts outputs back
    with pytest.raises(TypeError, match="unknown argument"):
        ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1), boost_config_dict={})


def test_grad_of_a_mutable_tuple_argument():
    class Product(nn.Cell):
        def construct(self, pair):
            x, y = pair
            return (x * y * y).sum()

    x = ms.Tensor(np.array([1.0, 2.0], np.float32))
    y = ms.Tensor(np.array([3.0, -1.0], np.float32))
    (gx, gy), = ms.GradOperation(get_all=True)(Product())(ms.mutable((x, y)))
    np.testing.assert_allclose(gx.asnumpy(), y.asnumpy() ** 2)
    np.testing.assert_allclose(gy.asnumpy(), 2 * x.asnumpy() * y.asnumpy())
