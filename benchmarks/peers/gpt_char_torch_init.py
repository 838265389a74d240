"""PyTorch peer of `benchmarks/gpt_char.py --same-init`: ../shared/peers/gpt_char_torch.py unchanged (its
model, recipe, batches and JSON line) plus `--init-out PATH`, which saves the model's initial weights as
an .npz under mstrain's GPT parameter names (the fused q/k/v Linear split into query/key/value, the
embedding given zero rows up to `--padded-vocab`: those rows' logits are masked, so they never change
the real ones), so the suite can train from the same first weights (`run_mode=finetune`).

    python gpt_char_torch_init.py --init-out /tmp/init.npz [--padded-vocab 72] [--steps 300]
"""
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.environ.get("MSTRAIN_PEERS_DIR", str(Path(__file__).resolve().parents[3] / "shared" / "peers")))

import gpt_char_torch as peer  # noqa: E402


def _take_option(name, default=None):
    """Remove `name VALUE` from the command line (the peer's own parser does not know it)."""
    if name not in sys.argv:
        return default
    at = sys.argv.index(name)
    value = sys.argv[at + 1]
    del sys.argv[at:at + 2]
    return value


def mstrain_names(model, padded_vocab):
    """{mstrain GPT parameter name: array} of the peer model's weights."""
    w = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    table = np.zeros((padded_vocab, w["wte.weight"].shape[1]), np.float32)
    table[:len(w["wte.weight"])] = w["wte.weight"]
    out = {"embedding.embedding_table": table, "position_embedding.embedding_table": w["wpe.weight"],
           "final_norm.gamma": w["ln_f.weight"], "final_norm.beta": w["ln_f.bias"]}
    for i in range(len(model.blocks)):
        src, dst = f"blocks.{i}.", f"blocks.{i}."
        for kind in ("weight", "bias"):
            for name, part in zip(("query", "key", "value"), np.split(w[f"{src}attn.qkv.{kind}"], 3)):
                out[f"{dst}attention.{name}.{kind}"] = part
            out[f"{dst}attention.projection.{kind}"] = w[f"{src}attn.proj.{kind}"]
            out[f"{dst}mlp.mapping.{kind}"] = w[f"{src}fc.{kind}"]
            out[f"{dst}mlp.projection.{kind}"] = w[f"{src}mlp_proj.{kind}"]
        for theirs, ours in (("ln_1", "attention_norm"), ("ln_2", "mlp_norm")):
            out[f"{dst}{ours}.gamma"], out[f"{dst}{ours}.beta"] = w[f"{src}{theirs}.weight"], w[f"{src}{theirs}.bias"]
    return out


def main():
    init_out = _take_option("--init-out")
    padded_vocab = int(_take_option("--padded-vocab", "72"))
    base = peer.GPT

    class SavingGPT(base):
        """The peer's GPT, its initial weights written to `init_out` once built."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if init_out:
                np.savez(init_out, **mstrain_names(self, padded_vocab))

    peer.GPT = SavingGPT
    peer.main()


if __name__ == "__main__":
    main()
