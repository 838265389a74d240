"""Shared by the torch-reference tests: a fused-q/k/v pre-LN torch block, our block weights under its
names, and the losses of one Model.train call (step by step or loop-sunk)."""
import numpy as np

from mstrain.train.callback import Callback


def torch_block(torch, width, heads, ffn, causal):
    """A pre-LN transformer block in torch (fused q/k/v Linear, GELU MLP) with `block_state`'s names:
    norm_attn, qkv, proj, norm_mlp, fc, fc_out."""
    F, tnn = torch.nn.functional, torch.nn

    class Block(tnn.Module):
        def __init__(self):
            super().__init__()
            self.norm_attn, self.norm_mlp = tnn.LayerNorm(width), tnn.LayerNorm(width)
            self.qkv, self.proj = tnn.Linear(width, 3 * width), tnn.Linear(width, width)
            self.fc, self.fc_out = tnn.Linear(width, ffn), tnn.Linear(ffn, width)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm_attn(x)).view(b, t, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, width))
            return x + self.fc_out(F.gelu(self.fc(self.norm_mlp(x))))

    return Block()


def block_state(ours, layers):
    """{torch name: array} of `layers` pre-LN blocks under `torch_block`'s names; q, k and v go to
    'qkv' side by side (one Linear)."""
    names = dict(attention_norm="norm_attn", mlp_norm="norm_mlp")
    state = {}
    for i in range(layers):
        b = f"blocks.{i}."
        for kind in ("weight", "bias"):
            parts = [ours[f"{b}attention.{n}.{kind}"] for n in ("query", "key", "value")]
            state[b + "qkv." + kind] = np.concatenate(parts)
            state[f"{b}proj.{kind}"] = ours[f"{b}attention.projection.{kind}"]
            state[f"{b}fc.{kind}"] = ours[f"{b}mlp.mapping.{kind}"]
            state[f"{b}fc_out.{kind}"] = ours[f"{b}mlp.projection.{kind}"]
        for mine, theirs in names.items():
            state[f"{b}{theirs}.weight"] = ours[f"{b}{mine}.gamma"]
            state[f"{b}{theirs}.bias"] = ours[f"{b}{mine}.beta"]
    return state


def assert_same_weights(ours, torch_model, width, atol=2e-6):
    """Every weight of `ours` ({torch name: array}) equals the torch model's, the norms' gains too (weight
    decay moves them). The key bias is left out: its gradient is zero (softmax ignores it), so Adam moves
    it by rounding noise on either side."""
    theirs = torch_model.state_dict()
    for name, value in ours.items():
        other = theirs[name].detach().numpy()
        if name.endswith("qkv.bias"):
            value, other = np.delete(value, np.s_[width:2 * width]), np.delete(other, np.s_[width:2 * width])
        np.testing.assert_allclose(value, other, rtol=0, atol=atol, err_msg=name)


def train_losses(model, data, sink, steps):
    """The loss of every step of one epoch of `model.train` over `data` (`steps` batches)."""
    losses = []

    class Record(Callback):
        def on_train_step_end(self, run_context):
            args = run_context.original_args()
            losses.extend(float(np.asarray(o.asnumpy())) for o in (args.step_outputs or [args.net_outputs]))

    model.train(1, data, callbacks=[Record()], dataset_sink_mode=sink, sink_size=steps if sink else -1)
    return np.array(losses)
