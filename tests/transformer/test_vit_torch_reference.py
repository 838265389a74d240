"""The ViT recipe of W7 against PyTorch: the peer's model (4x4 patches, class token, learned positions,
pre-LN blocks with a fused q/k/v Linear, exact GELU, head on the class token) holding our initial weights,
trained by torch's AdamW with its defaults on every parameter (W7's recipe), gives our losses and weights on
shipped MNIST images, step by step and in one loop-sunk call. Differences between the two sides' runs of
the benchmark therefore come from the initial draw, not from the model or the optimizer."""
from pathlib import Path

import numpy as np
import pytest

import mstrain as ms
from mstrain import Model, nn
from mstrain import dataset as ds
from mstrain.transformer import ViT, ViTConfig

from ..torch_support import import_torch
from ._torch_reference import assert_same_weights, block_state, torch_block, train_losses

MNIST = Path(__file__).resolve().parents[2] / "data/images/mnist/mnist_test10k.npz"

WIDTH, LAYERS, HEADS, FFN, PATCH, BATCH, STEPS = 32, 2, 2, 64, 4, 16, 4
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)  # torch's defaults, W7's recipe


def torch_vit(torch, net):
    tnn = torch.nn

    class Model_(tnn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed = tnn.Linear(PATCH * PATCH, WIDTH)
            self.cls_token = tnn.Parameter(torch.zeros(1, 1, WIDTH))
            self.positions = tnn.Parameter(torch.zeros(1, 50, WIDTH))
            self.blocks = tnn.ModuleList(torch_block(torch, WIDTH, HEADS, FFN, causal=False)
                                        for _ in range(LAYERS))
            self.norm, self.head = tnn.LayerNorm(WIDTH), tnn.Linear(WIDTH, 10)

        def forward(self, images):
            b, side = images.shape[0], 28 // PATCH
            patches = images.reshape(b, side, PATCH, side, PATCH).permute(0, 1, 3, 2, 4)
            x = self.patch_embed(patches.reshape(b, side * side, PATCH * PATCH))
            x = torch.cat([self.cls_token.expand(b, -1, -1), x], dim=1) + self.positions
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x[:, 0]))

    model = Model_()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in torch_state(net).items()}, strict=True)
    return model


def torch_state(net):
    """`net`'s weights under the torch model's names."""
    ours = {p.name: p.asnumpy() for p in net.trainable_params()}
    state = {"patch_embed.weight": ours["patch_embedding.weight"], "patch_embed.bias": ours["patch_embedding.bias"],
             "cls_token": ours["cls_token"], "positions": ours["positions"],
             "norm.weight": ours["final_norm.gamma"], "norm.bias": ours["final_norm.beta"],
             "head.weight": ours["head.weight"], "head.bias": ours["head.bias"]}
    state.update(block_state(ours, LAYERS))
    return {k: np.ascontiguousarray(v) for k, v in state.items()}


def mnist_batches():
    """STEPS batches of shipped MNIST test images, normalised as W7 does, and their labels."""
    with np.load(MNIST) as arrays:
        x, y = arrays["x"][:STEPS * BATCH], arrays["y"][:STEPS * BATCH]
    images = ((x.astype(np.float32) / 255.0 - 0.1307) / 0.3081).reshape(STEPS, BATCH, 1, 28, 28)
    return images, y.astype(np.int32).reshape(STEPS, BATCH)


def torch_losses(torch, model, images, labels):
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    losses = []
    for x, y in zip(images, labels):
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y.astype(np.int64)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses)


def our_losses(net, images, labels, sink):
    opt = nn.AdamW(net.trainable_params(), learning_rate=ADAMW["lr"], beta1=ADAMW["betas"][0],
                   beta2=ADAMW["betas"][1], eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"])
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), opt)
    data = ds.NumpySlicesDataset({"image": images.reshape(-1, 1, 28, 28), "label": labels.reshape(-1)},
                                 shuffle=False).batch(BATCH)
    return train_losses(model, data, sink, STEPS)


@pytest.mark.parametrize("sink", [False, True], ids=["step_by_step", "loop_sink"])
def test_vit_and_adamw_train_as_pytorch_does(sink):
    torch = import_torch()
    torch.set_num_threads(1)
    ms.set_seed(5)
    net = ViT(ViTConfig(hidden_size=WIDTH, num_layers=LAYERS, num_heads=HEADS, ffn_hidden_size=FFN))
    initial = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    images, labels = mnist_batches()
    model = torch_vit(torch, net)
    theirs = torch_losses(torch, model, images, labels)
    ours = our_losses(net, images, labels, sink)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-5)
    trained = {p.name: p.asnumpy() for p in net.trainable_params()}
    assert all(np.abs(trained[n] - initial[n]).max() > 1e-4 for n in trained if "key.bias" not in n)  # all moved
    assert_same_weights(torch_state(net), model, WIDTH)
