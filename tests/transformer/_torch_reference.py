"""Shared by the torch-reference tests: our block weights under a fused-q/k/v torch block's names, and
the losses of one Model.train call (step by step or loop-sunk)."""
import numpy as np

from mstrain.train.callback import Callback


def block_state(ours, layers, names):
    """{torch name: array} of `layers` pre-LN blocks. `names` maps our parts to the torch block's:
    keys 'attention_norm', 'mlp_norm', 'projection', 'mapping', 'mlp_projection'; q, k and v go to
    'qkv' side by side (one Linear)."""
    state = {}
    for i in range(layers):
        b = f"blocks.{i}."
        for kind in ("weight", "bias"):
            parts = [ours[f"{b}attention.{n}.{kind}"] for n in ("query", "key", "value")]
            state[b + "qkv." + kind] = np.concatenate(parts)
            state[f"{b}{names['projection']}.{kind}"] = ours[f"{b}attention.projection.{kind}"]
            state[f"{b}{names['mapping']}.{kind}"] = ours[f"{b}mlp.mapping.{kind}"]
            state[f"{b}{names['mlp_projection']}.{kind}"] = ours[f"{b}mlp.projection.{kind}"]
        for mine in ("attention_norm", "mlp_norm"):
            state[f"{b}{names[mine]}.weight"] = ours[f"{b}{mine}.gamma"]
            state[f"{b}{names[mine]}.bias"] = ours[f"{b}{mine}.beta"]
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
