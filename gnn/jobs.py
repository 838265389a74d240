"""Jobs `gcn` and `gat`: node classification on a Planetoid graph from a YAML config.

    mstrain --config configs/gcn_cora.yaml [train.epochs=50 train.seeds=10 data.name=citeseer ...]

Each seed trains one model with the papers' protocol (see `gnn.experiment`) and logs one line per
epoch (loss, validation loss and accuracy). Written to `train.output_dir`: train.log, and per seed
history.json, summary.json, curves.png (training curves) and embeddings.png (PCA of the hidden
layer coloured by class). The job returns the test accuracy, as mean and std over the seeds.
"""
import logging
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

from mstrain.config import JobConfig, option, section
from mstrain.log import get_logger
from mstrain.registry import register_job

from .experiment import train_node_classification

__all__ = ["GCNJobConfig", "GATJobConfig", "run_gcn", "run_gat"]


@dataclass
class PlanetoidData:
    """The Planetoid dataset: `ind.<name>.*` or `<name>.npz` under `root`."""
    root: str = option("data/planetoid", "directory of the dataset files, relative to cwd or the repo root")
    name: str = option("cora", "dataset name (cora, citeseer, pubmed or any set laid out the same way)")
    source: str = option("auto", "which files to read: the .npz when present (auto), the raw pickles or the .npz",
                         choices=("auto", "raw", "npz"))
    normalize_features: bool = option(True, "divide every feature row by its sum (both papers' preprocessing)")


@dataclass
class GNNTrain:
    """Full-batch training: epochs, early stopping, seeds, mixed precision, outputs."""
    epochs: int = option(200, "maximum training epochs (one full-batch step each)", low=1)
    seed: int = option(0, "seed of the first model (weights, dropout masks)", low=0)
    seeds: int = option(1, "models trained, seeds seed .. seed+seeds-1; the accuracy is reported as mean and std",
                        low=1)
    early_stopping: str = option("kipf", "stopping rule: kipf (window on the validation cost), patience "
                                 "(Velickovic: no improvement of val loss or accuracy), none",
                                 choices=("kipf", "patience", "none"))
    window: int = option(10, "kipf rule: epochs averaged for the comparison", low=1)
    patience: int = option(100, "patience rule: epochs without improvement before stopping", low=1)
    amp_level: str = option("O0", "mixed precision: O0 float32; O2 float16 compute, float32 master weights, "
                            "dynamic loss scale", choices=("O0", "O2"))
    loss_scale: float = option(65536.0, "initial dynamic loss scale for amp_level O2", low=1.0)
    log_every: int = option(1, "epochs between progress lines (loss, val accuracy); 0 = none", low=0)
    output_dir: str = option("outputs/gnn", "directory for train.log, curves.png, embeddings.png, summaries")


@dataclass
class GATTrain(GNNTrain):
    """Full-batch training: epochs, early stopping, seeds, mixed precision, outputs."""
    epochs: int = option(100000, "maximum training epochs (the patience rule ends training long before)", low=1)
    early_stopping: str = option("patience", "stopping rule: kipf, patience or none",
                                 choices=("kipf", "patience", "none"))


@dataclass
class GCNOptimizer:
    """Adam, as the paper."""
    name: str = option("adam", "optimizer (the GNN jobs train with Adam)", choices=("adam",))
    lr: float = option(0.01, "learning rate", low=0.0)
    weight_decay: float = option(5e-4, "L2 weight decay (on the parameters named by model.decay)", low=0.0)
    betas: Tuple[float, float] = option((0.9, 0.999), "Adam beta1, beta2", low=0.0, high=0.999999)
    eps: float = option(1e-8, "Adam epsilon added to the denominator", low=0.0)


@dataclass
class GATOptimizer(GCNOptimizer):
    """Adam, as the paper."""
    lr: float = option(0.005, "learning rate", low=0.0)


@dataclass
class GCNModel:
    """GCN (Kipf & Welling, 2017): two graph convolutions, ReLU, dropout."""
    hidden: int = option(16, "hidden units", low=1)
    dropout: float = option(0.5, "dropout on each layer's input", low=0.0, high=1.0)
    decay: str = option("first_layer", "parameters under the optimizer's weight decay",
                        choices=("first_layer", "all"))


@dataclass
class GATModel:
    """GAT (Velickovic et al., 2018): multi-head attention layers, ELU, dropout."""
    hidden: int = option(8, "features per attention head in the first layer", low=1)
    heads: int = option(8, "attention heads of the first layer (concatenated)", low=1)
    output_heads: int = option(1, "attention heads of the output layer (averaged)", low=1)
    dropout: float = option(0.6, "dropout on each layer's input and on the attention coefficients",
                            low=0.0, high=1.0)
    decay: str = option("all", "parameters under the optimizer's weight decay", choices=("first_layer", "all"))


@dataclass
class GCNJobConfig(JobConfig):
    """Config of the gcn job."""
    train: GNNTrain = section(GNNTrain)
    optimizer: GCNOptimizer = section(GCNOptimizer)
    data: PlanetoidData = section(PlanetoidData)
    model: GCNModel = section(GCNModel)


@dataclass
class GATJobConfig(JobConfig):
    """Config of the gat job."""
    train: GATTrain = section(GATTrain)
    optimizer: GATOptimizer = section(GATOptimizer)
    data: PlanetoidData = section(PlanetoidData)
    model: GATModel = section(GATModel)


def _settings(cfg):
    """The keyword overrides of `train_node_classification` that the config spells out."""
    model = {k: v for k, v in vars(cfg.model).items()}
    return dict(model, lr=cfg.optimizer.lr, weight_decay=cfg.optimizer.weight_decay, betas=tuple(cfg.optimizer.betas),
                eps=cfg.optimizer.eps, epochs=cfg.train.epochs,
                early_stopping=cfg.train.early_stopping, window=cfg.train.window, patience=cfg.train.patience,
                amp_level=cfg.train.amp_level, loss_scale=cfg.train.loss_scale, log_every=cfg.train.log_every,
                normalize_features=cfg.data.normalize_features, source=cfg.data.source)


def _run(model, cfg):
    settings = _settings(cfg)
    output_dir = Path(cfg.train.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    log = get_logger("gnn")
    handler = logging.FileHandler(output_dir / "train.log", mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root_logger = logging.getLogger("mstrain")
    root_logger.addHandler(handler)
    try:
        runs = []
        for seed in range(cfg.train.seed, cfg.train.seed + cfg.train.seeds):
            seed_dir = output_dir / f"seed_{seed}" if cfg.train.seeds > 1 else output_dir
            runs.append(train_node_classification(model=model, dataset=cfg.data.name, root=cfg.data.root,
                                                  seed=seed, output_dir=str(seed_dir), **settings))
        summary = _summary(model, cfg, runs, output_dir)
        log.info("%s on %s: test accuracy %.2f%% +- %.2f over %d seed(s); outputs in %s", model, cfg.data.name,
                 100 * summary["test_acc"], 100 * summary["test_acc_std"], len(runs), output_dir)
    finally:
        root_logger.removeHandler(handler)
        handler.close()
    return summary


def _summary(model, cfg, runs, output_dir):
    accuracies = [r["test_acc"] for r in runs]
    return {"model": model, "dataset": cfg.data.name, "test_acc": statistics.mean(accuracies),
            "test_acc_std": statistics.pstdev(accuracies), "test_acc_per_seed": accuracies,
            "val_acc": statistics.mean(r["val_acc"] for r in runs), "epochs": [r["epochs"] for r in runs],
            "seeds": len(runs), "ms_per_epoch": statistics.median(r["ms_per_epoch"] for r in runs),
            "output_dir": str(output_dir)}


@register_job("gcn", schema=GCNJobConfig)
def run_gcn(cfg):
    """GCN node classification on a Planetoid graph (Kipf & Welling, 2017)."""
    return _run("gcn", cfg)


@register_job("gat", schema=GATJobConfig)
def run_gat(cfg):
    """GAT node classification on a Planetoid graph (Velickovic et al., 2018)."""
    return _run("gat", cfg)
