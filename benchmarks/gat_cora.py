"""W3b gat-cora: ms per full-batch training epoch of a 2-layer GAT on Cora, and its test accuracy.

    PYTHONPATH=. python benchmarks/gat_cora.py [--seeds 10] [--peer]

The experiment of BENCHMARKS.md W3b and of ../shared/peers/gat_cora_*.py: 8 heads x 8 features
(ELU, concatenated) then 1 head for the 7 classes, LeakyReLU 0.2, dropout 0.6 on each layer's
input (sparse on the features) and on the attention coefficients, Glorot weights as PyG, Adam lr
0.005 with L2 5e-4 on every parameter, Velickovic's early stopping (patience 100 on validation loss
and accuracy; the kept parameters are tested). Timing, output lines and --peer as in gcn_cora.py.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gcn_cora import main  # noqa: E402  (the shared runner of W3a and W3b)

if __name__ == "__main__":
    sys.exit(main("gat"))
