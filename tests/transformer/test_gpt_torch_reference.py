"""The GPT recipe of W1 against PyTorch: nanoGPT's model (pre-LN, fused q/k/v Linear, GELU MLP, tied
output, the 65 real characters only) started from our initial weights and trained by torch's AdamW
on the nanoGPT decay groups gives the same losses and weights as our GPT trained by Model, step by
step and in one loop-sunk call. Differences between the two frameworks' runs of the benchmark
therefore come from the initial draw and batches, not from the model or the optimizer. The second test
runs a 128-token context (the attention kernel's chunked key path with the causal skipping of W1) with
sharpened query and key weights, so the softmax rows are peaked as after training."""
import numpy as np
import pytest

import mstrain as ms
from mstrain import Model, nn
from mstrain import dataset as ds
from mstrain.transformer import GPT, GPTConfig, GPTLoss
from mstrain.transformer.jobs import decay_groups

from ..torch_support import import_torch
from ._torch_reference import assert_same_weights, block_state, torch_block, train_losses

VOCAB, LAYERS, HEADS, WIDTH, BLOCK, BATCH, STEPS = 65, 2, 4, 64, 32, 4, 4
OPTIMIZER = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def torch_gpt(torch, net, block):
    """nanoGPT's model (its blocks: torch_block) holding `net`'s weights (the padded vocabulary rows left out)."""
    F, tnn = torch.nn.functional, torch.nn

    class Model_(tnn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = tnn.Embedding(VOCAB, WIDTH), tnn.Embedding(block, WIDTH)
            self.blocks = tnn.ModuleList(torch_block(torch, WIDTH, HEADS, 4 * WIDTH, causal=True)
                                        for _ in range(LAYERS))
            self.ln_f = tnn.LayerNorm(WIDTH)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.T
            return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))

    model = Model_()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in torch_state(net).items()}, strict=True)
    return model


def torch_state(net):
    """`net`'s weights under nanoGPT's names (the padded vocabulary rows left out)."""
    ours = {p.name: p.asnumpy() for p in net.trainable_params()}
    state = {"wte.weight": ours["embedding.embedding_table"][:VOCAB],
             "wpe.weight": ours["position_embedding.embedding_table"],
             "ln_f.weight": ours["final_norm.gamma"], "ln_f.bias": ours["final_norm.beta"]}
    state.update(block_state(ours, LAYERS))
    return {k: np.ascontiguousarray(v) for k, v in state.items()}


def batches(block):
    """(inputs, labels) of STEPS batches: windows of a random id stream and their next ids."""
    rng = np.random.default_rng(3)
    ids = rng.integers(0, VOCAB, 20_000)
    starts = rng.integers(0, len(ids) - block - 1, (STEPS, BATCH))
    windows = ids[starts[..., None] + np.arange(block + 1)].astype(np.int32)
    return windows[..., :-1], windows[..., 1:]


def torch_losses(torch, net, inputs, labels):
    model = torch_gpt(torch, net, inputs.shape[-1])
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPTIMIZER["weight_decay"]},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=OPTIMIZER["lr"], betas=OPTIMIZER["betas"], eps=OPTIMIZER["eps"])
    losses = []
    for x, y in zip(inputs, labels):
        loss = model(torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses), model


def our_losses(net, inputs, labels, sink):
    opt = nn.AdamW(decay_groups(net, OPTIMIZER["weight_decay"]), learning_rate=OPTIMIZER["lr"],
                   beta1=OPTIMIZER["betas"][0], beta2=OPTIMIZER["betas"][1], eps=OPTIMIZER["eps"])
    model = Model(net, GPTLoss(net), opt)
    block = inputs.shape[-1]
    data = ds.NumpySlicesDataset({"input_ids": inputs.reshape(-1, block), "labels": labels.reshape(-1, block)},
                                 shuffle=False).batch(BATCH)
    return train_losses(model, data, sink, STEPS)


def compare_with_torch(sink, block, score_gain=1.0):
    torch = import_torch()
    torch.set_num_threads(1)
    ms.set_seed(11)
    net = GPT(GPTConfig(vocab_size=VOCAB, num_layers=LAYERS, num_heads=HEADS, hidden_size=WIDTH,
                        seq_length=block, vocab_pad_multiple=8))
    for p in net.trainable_params():  # scores scaled by score_gain: the query and key weights by its root
        if p.name.endswith(("attention.query.weight", "attention.key.weight")):
            p.set_data(ms.Tensor(p.asnumpy() * np.sqrt(score_gain)))
    inputs, labels = batches(block)
    initial = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    theirs, model = torch_losses(torch, net, inputs, labels)
    ours = our_losses(net, inputs, labels, sink)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-5)
    trained = {p.name: p.asnumpy() for p in net.trainable_params()}
    assert all(np.abs(trained[n] - initial[n]).max() > 1e-4 for n in trained if "key.bias" not in n)  # all moved
    if score_gain == 1.0:  # every weight within 2e-5 of its torch twin
        assert_same_weights(torch_state(net), model, WIDTH, atol=2e-5)
    else:  # peaked rows leave some gradients at rounding noise, which Adam turns into full-size steps
        np.testing.assert_allclose(trained["embedding.embedding_table"][:VOCAB], model.wte.weight.detach().numpy(),
                                   rtol=0, atol=2e-5)
        np.testing.assert_allclose(trained["blocks.1.mlp.projection.weight"],
                                   model.blocks[1].fc_out.weight.detach().numpy(), rtol=0, atol=2e-5)
    return model, inputs


@pytest.mark.parametrize("sink", [False, True], ids=["step_by_step", "loop_sink"])
def test_gpt_and_adamw_train_as_pytorch_does(sink):
    compare_with_torch(sink, BLOCK)


@pytest.mark.parametrize("sink", [False, True], ids=["step_by_step", "loop_sink"])
def test_peaked_attention_over_a_long_context_trains_as_pytorch_does(sink):
    model, inputs = compare_with_torch(sink, 128, score_gain=400.0)
    torch = import_torch()
    block = model.blocks[0]  # the test's premise: the softmax rows are peaked (as after training)
    with torch.no_grad():
        x = model.wte(torch.from_numpy(inputs[0].astype(np.int64))) + model.wpe(torch.arange(128))
        q, k, _ = block.qkv(block.norm_attn(x)).split(WIDTH, dim=2)
        heads = lambda v: v.view(BATCH, 128, HEADS, WIDTH // HEADS).transpose(1, 2)  # noqa: E731
        scores = heads(q) @ heads(k).transpose(-1, -2) / np.sqrt(WIDTH // HEADS)
        scores = scores.masked_fill(torch.ones(128, 128).triu(1).bool(), float("-inf"))
        top = scores.softmax(-1).max(-1).values[..., 32:]
    assert float(top.median()) > 0.9, float(top.median())
