"""One call runs a whole node-classification experiment, as the papers ran it.

>>> import mstrain.gnn as gnn
>>> result = gnn.train_node_classification(model="gcn", dataset="cora", root="data/planetoid",
...                                        seed=0, log_every=0)      # doctest: +SKIP
>>> round(result["test_acc"], 3), result["epochs"]                    # doctest: +SKIP

Defaults per model follow the papers' code (and the peers in BENCHMARKS.md W3a/W3b); any of
`settings_for(model)` can be overridden by keyword. Results: test_acc, val_acc, epochs (trained),
tested_epoch, ms_per_epoch (median training step), seconds, history (per epoch: train_loss,
val_loss, val_acc, step_ms) and, with output_dir, the paths of the files written there.
"""
import json
import os
import time
from pathlib import Path

import numpy as np

import mstrain as ms
from mstrain import nn
from mstrain.errors import ConfigError
from mstrain.log import get_logger
from mstrain.observe import TrainingSteps

from .models import GAT, GCN
from .planetoid import Planetoid
from .plot import plot_embeddings, plot_history
from .train import NodeClassificationTrainer, make_stopping_rule

__all__ = ["train_node_classification", "settings_for", "MODEL_DEFAULTS", "COMMON_DEFAULTS", "load_graph"]

MODEL_DEFAULTS = {
    # Kipf & Welling (2017): weight decay on the first layer only, window-10 stopping on val cost.
    "gcn": {"hidden": 16, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4, "decay": "first_layer",
            "epochs": 200, "early_stopping": "kipf", "window": 10, "patience": 100},
    # Velickovic et al. (2018): 8 heads x 8, one output head, decay everywhere, patience 100.
    "gat": {"hidden": 8, "heads": 8, "output_heads": 1, "dropout": 0.6, "lr": 0.005, "weight_decay": 5e-4,
            "decay": "all", "epochs": 100000, "early_stopping": "patience", "window": 10, "patience": 100},
}
COMMON_DEFAULTS = {"amp_level": "O0", "loss_scale": 2.0 ** 16, "normalize_features": True, "source": "auto",
                   "output_dir": None, "log_every": 1, "betas": (0.9, 0.999), "eps": 1e-8}
_graphs = {}


def settings_for(model, **overrides):
    """The full settings of `model` with `overrides` applied; unknown names raise ConfigError."""
    if model not in MODEL_DEFAULTS:
        raise ConfigError(f"unknown model {model!r}; known: {', '.join(sorted(MODEL_DEFAULTS))}", key="model")
    settings = dict(MODEL_DEFAULTS[model], **COMMON_DEFAULTS)
    unknown = sorted(set(overrides) - set(settings))
    if unknown:
        raise ConfigError(f"unknown setting(s) {unknown} for model {model!r}; known: {', '.join(sorted(settings))}")
    settings.update(overrides)
    if settings["decay"] not in ("first_layer", "all"):
        raise ConfigError(f"decay must be 'first_layer' or 'all', got {settings['decay']!r}", key="decay")
    return settings


def load_graph(root, dataset, normalize_features=True, source="auto"):
    """The dataset's graph, loaded once per process (every seed of a study shares it)."""
    key = (str(Path(root).resolve()), str(dataset).lower(), normalize_features, source)
    if key not in _graphs:
        _graphs[key] = Planetoid(root, dataset, normalize_features, source).graph
    return _graphs[key]


def _build(model, graph, settings):
    """(network, optimizer, parameters under the L2 term)."""
    if model == "gcn":
        net = GCN(graph.num_features, settings["hidden"], graph.num_classes, dropout=settings["dropout"])
    else:
        net = GAT(graph.num_features, settings["hidden"], graph.num_classes, heads=settings["heads"],
                  output_heads=settings["output_heads"], dropout=settings["dropout"])
    decay = settings["weight_decay"]
    if settings["decay"] == "first_layer":
        decayed = net.first_layer_params()
        rest = [p for p in net.trainable_params() if all(p is not d for d in decayed)]
        groups = [{"params": decayed, "weight_decay": decay}, {"params": rest, "weight_decay": 0.0}]
    else:
        decayed = net.trainable_params()
        groups = [{"params": decayed, "weight_decay": decay}]
    beta1, beta2 = settings["betas"]
    optimizer = nn.Adam(groups, learning_rate=settings["lr"], beta1=beta1, beta2=beta2, eps=settings["eps"])
    return net, optimizer, decayed


def train_node_classification(model="gcn", dataset="cora", root="data/planetoid", seed=0, **overrides):
    """Train `model` ('gcn' | 'gat') on Planetoid `dataset` from `root` with `seed`; returns a dict
    with test_acc, val_acc, epochs, history and timing (see the module docstring)."""
    settings = settings_for(model, **overrides)
    log = get_logger("gnn")
    graph = load_graph(root, dataset, settings["normalize_features"], settings["source"])
    ms.set_seed(seed)
    net, optimizer, decayed = _build(model, graph, settings)
    trainer = NodeClassificationTrainer(net, graph, optimizer, settings["amp_level"], settings["loss_scale"])
    rule = make_stopping_rule(settings["early_stopping"], window=settings["window"], patience=settings["patience"],
                              l2_weight=settings["weight_decay"], l2_params=decayed)
    history, start = [], time.perf_counter()
    steps = TrainingSteps(network=net, optimizer=optimizer)  # the run's profiler, summaries, dump, lineage
    for epoch in range(settings["epochs"]):
        with steps.step(inputs=(graph.x, graph, None)) as step:
            train_loss = step.loss = trainer.train_epoch()
        val_loss, val_acc = trainer.evaluate(graph.val_mask)
        history.append({"epoch": epoch + 1, "train_loss": train_loss, "val_loss": val_loss, "val_acc": val_acc,
                        "step_ms": 1e3 * trainer.step_seconds[-1]})
        if settings["log_every"] and (epoch + 1) % settings["log_every"] == 0:
            log.info("%s %s seed %d epoch %d: loss %.4f val_loss %.4f val_acc %.4f", model, graph.name, seed,
                     epoch + 1, train_loss, val_loss, val_acc)
        if rule.update(trainer, epoch, val_loss, val_acc):
            break
    test_acc, val_acc, tested_epoch = rule.finish(trainer)
    steps.end({"val_acc": val_acc, "test_acc": test_acc})
    result = {"model": model, "dataset": graph.name, "seed": seed, "test_acc": test_acc, "val_acc": val_acc,
              "epochs": len(history), "tested_epoch": tested_epoch, "stop_epoch": rule.stop_epoch,
              "ms_per_epoch": trainer.ms_per_epoch(), "seconds": time.perf_counter() - start,
              "amp_level": settings["amp_level"], "skipped_steps": trainer.skipped_steps, "history": history}
    if settings["log_every"]:
        log.info("%s %s seed %d: test_acc %.4f (val_acc %.4f, parameters of epoch %d of %d)", model, graph.name,
                 seed, test_acc, val_acc, tested_epoch, len(history))
    if settings["output_dir"]:
        result["outputs"] = write_outputs(settings["output_dir"], trainer, result)
    return result


def write_outputs(output_dir, trainer, result):
    """history.json, summary.json, curves.png and embeddings.png (PCA of the hidden layer) in output_dir."""
    directory = Path(output_dir)
    directory.mkdir(parents=True, exist_ok=True)
    trainer.model.set_train(False)
    with ms.no_grad():
        embeddings = trainer.model.embed(trainer.graph.x, trainer.graph).asnumpy().astype(np.float32)
    paths = {"embeddings": str(directory / "embeddings.png"), "curves": str(directory / "curves.png"),
             "history": str(directory / "history.json"), "summary": str(directory / "summary.json")}
    plot_embeddings(paths["embeddings"], embeddings, trainer.graph.y)
    plot_history(paths["curves"], result["history"])
    _write_json(paths["history"], result["history"])
    _write_json(paths["summary"], {k: v for k, v in result.items() if k != "history"})
    return paths


def _write_json(path, value):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
