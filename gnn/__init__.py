"""mstrain GNN kit: graph data (Planetoid), message passing, GCN and GAT, neighbour sampling.

A whole experiment, as the papers ran it (defaults of `gnn.settings_for(model)`, any overridable):

    import mstrain.gnn as gnn
    result = gnn.train_node_classification(model="gcn", dataset="cora", root="data/planetoid", seed=0)
    result["test_acc"], result["epochs"], result["history"][-1]

The same in a few lines of your own:

    import mstrain as ms
    from mstrain import nn
    from mstrain.gnn import GCN, KipfStopping, Planetoid, NodeClassificationTrainer
    graph = Planetoid("data/planetoid", "cora")[0]
    model = GCN(graph.num_features, 16, graph.num_classes)
    trainer = NodeClassificationTrainer(model, graph, nn.Adam(model.trainable_params(), learning_rate=0.01,
                                                              weight_decay=5e-4))
    history = trainer.fit(200, callbacks=[KipfStopping(trainer, window=10)])   # mstrain.Model underneath
    test_loss, test_acc = trainer.evaluate(graph.test_mask)
"""
from .sparse import SparseMatrix, SparsePattern
from .graph import Graph, add_self_loops, gcn_norm, remove_self_loops
from .planetoid import DatasetFormatError, Planetoid, load_planetoid
from .conv import (AGGREGATIONS, GATConv, GCNConv, MessagePassing, SAGEConv, register_aggregation,
                   resolve_aggregation)
from .models import GAT, GCN, GraphSAGE, feature_dropout
from .sampler import NeighborSampler, SampledBatch
from .train import (KipfStopping, NodeClassificationLoss, NodeClassificationTrainer, NoStopping,
                    PatienceStopping, STOPPING_RULES)
from .experiment import settings_for, train_node_classification
from . import ops, plot

__all__ = [
    "SparseMatrix", "SparsePattern", "Graph", "add_self_loops", "remove_self_loops", "gcn_norm",
    "Planetoid", "load_planetoid", "DatasetFormatError", "MessagePassing", "GCNConv", "GATConv", "SAGEConv",
    "AGGREGATIONS", "register_aggregation", "resolve_aggregation", "GCN", "GAT", "GraphSAGE",
    "feature_dropout", "NeighborSampler", "SampledBatch", "NodeClassificationTrainer", "NodeClassificationLoss",
    "KipfStopping", "PatienceStopping", "NoStopping", "STOPPING_RULES",
    "train_node_classification", "settings_for", "ops", "plot",
]
