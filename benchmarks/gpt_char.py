"""W1 gpt-char: training tokens/s, MFU and validation loss of the character GPT, as a user runs it.

    PYTHONPATH=. python benchmarks/gpt_char.py [--steps 300] [--sink-size 50] [--seeds 0,1,2] [--peer]

Runs `mstrain --config gpt_char` (W1 shape: 4 layers, 4 heads, 256 wide, block 128, batch 16,
AdamW lr 1e-3 betas (0.9, 0.95) weight decay 0.1 on matrices and embeddings, the peer's batches
from numpy.random.default_rng(seed)) in sink mode and reads its history.json.
Speed: median tokens/s over the sinks after the first (which includes the one-off compilation).
Quality: validation loss after the run over every non-overlapping 128-token window (the peer's).
MFU: model FLOPs per token (3 x forward: every matrix product, attention scores and context,
tied logits) x tokens/s over the float32 GEMM peak of numpy measured in the same run (2048^3, the fastest of 5).
`--peer` then runs ../shared/peers/gpt_char_torch.py with the same steps and prints the ratio line.
`--same-init` (with --peer) runs the peer first through benchmarks/peers/gpt_char_torch_init.py, which
saves its initial weights, and trains ours from them (`run_mode=finetune`): the val loss difference then
measures the two implementations, not the two initial draws (from their own draws, seed to seed, each
side's val loss after 300 steps moves by about 0.1).
`--seeds 0,1,2` repeats the run (and the peer's) for each seed (the initial draw and the batches) and
adds a summary line with each side's mean and spread of the val loss: one 300-step val loss is chaotic
in roundoff (a learning rate of 1.00005e-3 instead of 1e-3 moves ours from 2.27 to 2.46, as a seed moves
the peer's from 2.36 to 2.47), so the quality goal is judged on means over seeds.
`--generation` instead times greedy decoding of 64 and 512 new tokens after an 8-token prompt with
and without the KV cache (W1 width and depth, seq_length 1024 so no context restart): new tokens/s
and ms per token (with the cache it stays about flat from 64 to 512; without, it grows with length).
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mstrain  # noqa: E402,F401  (first: its BLAS thread settings must be set before numpy loads OpenBLAS)
import numpy as np  # noqa: E402

from _common import REPO, emit, parse_seeds, ratio, record, run_peer, seed_summary  # noqa: E402

LAYERS, HEADS, WIDTH, BLOCK, BATCH, PADDED_VOCAB = 4, 4, 256, 128, 16, 72


def gemm_peak_flops(size=2048, repeats=5):
    """float32 FLOP/s of numpy's matmul on size x size matrices: the fastest of `repeats`. A peak is an
    upper bound, so the best run counts; a median read under load (95 instead of about 300 GFLOP/s
    once) made MFU exceed 1."""
    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((size, size), dtype=np.float32)
    np.matmul(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(a, b)
        times.append(time.perf_counter() - start)
    return 2.0 * size ** 3 / min(times)


def train_flops_per_token():
    """3 x the forward FLOPs of one token (multiply-adds count 2)."""
    per_layer = 2 * (4 * WIDTH * WIDTH + 2 * 4 * WIDTH * WIDTH) + 2 * 2 * BLOCK * WIDTH  # matrices + attention
    forward = LAYERS * per_layer + 2 * WIDTH * PADDED_VOCAB
    return 3 * forward


def run_ours(steps, sink_size, out_dir, seed, init_checkpoint=None):
    cmd = [sys.executable, "-m", "mstrain.cli", "--config", "gpt_char", f"train.steps={steps}", f"train.seed={seed}",
           f"train.sink_size={sink_size}", f"train.eval_every={steps}", "train.dataset_sink_mode=true",
           f"train.output_dir={out_dir}"]
    if init_checkpoint is not None:
        cmd += ["run_mode=finetune", f"load_checkpoint={init_checkpoint}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads((Path(out_dir) / "history.json").read_text())


def generation_lines():
    """Greedy decoding speed with and without the KV cache: one JSON line per (length, mode)."""
    import mstrain as ms
    from mstrain.transformer import GPT, GPTConfig

    ms.set_seed(0)
    net = GPT(GPTConfig(vocab_size=65, num_layers=LAYERS, num_heads=HEADS, hidden_size=WIDTH, seq_length=1024))
    prompt = (np.arange(8) % 65)[None]
    net.generate(prompt, 2)  # warm-up
    for new_tokens in (64, 512):
        for use_cache in (True, False):
            start = time.perf_counter()
            net.generate(prompt, new_tokens, use_cache=use_cache)
            seconds = time.perf_counter() - start
            emit(record("W1", "gpt-char", "generate_cache" if use_cache else "generate_no_cache",
                        "new_tokens_per_s", new_tokens / seconds, None, None, new_tokens=new_tokens,
                        ms_per_token=round(1e3 * seconds / new_tokens, 3)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--sink-size", type=int, default=50)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, one run of each side per seed")
    parser.add_argument("--peer", action="store_true")
    parser.add_argument("--generation", action="store_true")
    parser.add_argument("--same-init", action="store_true",
                        help="with --peer: train ours from the peer's initial weights")
    args = parser.parse_args()
    if args.same_init and not args.peer:
        parser.error("--same-init needs --peer (the initial weights come from the peer)")
    seeds = parse_seeds(args.seeds)
    if args.generation:
        generation_lines()
        return
    peak = gemm_peak_flops()
    runs = [one_seed(args, seed, peak) for seed in seeds]
    if len(seeds) > 1:
        emit(seed_summary("W1", "gpt-char", "loop_sink", runs, "val_loss", args.seeds))


def one_seed(args, seed, peak):
    """(our JSON line, the peer's or None) of one seed, both printed."""
    with tempfile.TemporaryDirectory() as out_dir:
        peer, init = None, None
        if args.same_init:
            peer, init = peer_with_init(args.steps, seed, out_dir)
        history = run_ours(args.steps, args.sink_size, out_dir, seed, init)
    records = history["records"]
    steady = [r["tokens_per_s"] for r in records[1:]] or [records[0]["tokens_per_s"]]
    tokens_per_s = float(np.median(steady))
    flops = train_flops_per_token()
    ours = record("W1", "gpt-char", "loop_sink", "train_tokens_per_s", tokens_per_s,
                  f"val_loss_after_{args.steps}_steps", records[-1]["val_loss"],
                  mfu=round(flops * tokens_per_s / peak, 4), numpy_gemm_peak_gflops=round(peak / 1e9, 2),
                  train_gflops_per_s=round(flops * tokens_per_s / 1e9, 2), steps=args.steps,
                  sink_size=args.sink_size, final_train_loss=round(history["step_loss"][-1], 6),
                  first_sink_tokens_per_s=records[0]["tokens_per_s"], same_init=args.same_init, seed=seed)
    emit(ours)
    if args.peer:
        peer = peer or run_peer("gpt_char_torch.py", ["--steps", str(args.steps), "--seed", str(seed)])[0]
        emit(ratio(ours, peer, val_loss_mstrain=ours["quality"], val_loss_peer=peer["quality"],
                   val_loss_diff=round(ours["quality"] - peer["quality"], 4), same_init=args.same_init, seed=seed))
    return ours, peer


def peer_with_init(steps, seed, out_dir):
    """The peer's JSON line and a checkpoint of its initial weights (mstrain's names) in `out_dir`."""
    import mstrain as ms
    weights = Path(out_dir) / "peer_init.npz"
    peer = run_peer(str(Path(__file__).resolve().parent / "peers" / "gpt_char_torch_init.py"),
                    ["--steps", str(steps), "--seed", str(seed), "--init-out", str(weights),
                     "--padded-vocab", str(PADDED_VOCAB)])[0]
    with np.load(weights) as arrays:
        checkpoint = ms.save_checkpoint({name: arrays[name] for name in arrays.files}, str(Path(out_dir) / "peer_init"))
    return peer, checkpoint


if __name__ == "__main__":
    main()
