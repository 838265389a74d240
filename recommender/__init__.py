"""mstrain recommender kit: Wide&Deep, Criteo preprocessing and the multi-level distributed
embedding store (in the spirit of MindSpore Recommender). Imports only `core`'s public names.

    preprocess_criteo(src, out_dir, ...)      Criteo TSV -> record files + vocab.json   (criteo)
    WideDeep, WideDeepTrainStep               the model zoo's Wide&Deep                  (widedeep)
    CachedEmbeddingLookup                     hot-row cache over a host or disk store    (store)
    prefetch_rows(dataset, {table: columns})  next-batch rows staged during the step     (prefetch)
    ShardedEmbeddingLookup, ShardedTrainStep  tables sharded over MPI ranks, all-to-all  (sharded)
    save_sharded_table, load_sharded_table    streamed per-rank checkpoints, any rank count (sharded_checkpoint)
    ShardedRunCheckpoint, restore_sharded_run a whole run's checkpoints, resumed on any rank count (run_checkpoint)
    LogRows                                   the disk level: base file + append-only log   (log_rows)
    train_widedeep(cfg)                       the `widedeep` job                         (jobs)
"""
from .criteo import CriteoFormatError, load_vocab, preprocess_criteo, read_criteo_lines
from .log_rows import LogRows
from .prefetch import prefetch_rows
from .run_checkpoint import ShardedRunCheckpoint, restore_sharded_run
from .sharded import ShardedEmbeddingLookup, ShardedTrainStep
from .sharded_checkpoint import load_sharded_table, save_sharded_table
from .store import CachedEmbeddingLookup, EmbeddingCacheMonitor
from .widedeep import WideDeep, WideDeepTrainStep, WideDeepWithLoss, wide_deep_optimizers

__all__ = ["CriteoFormatError", "load_vocab", "preprocess_criteo", "read_criteo_lines", "WideDeep",
           "WideDeepTrainStep", "WideDeepWithLoss", "wide_deep_optimizers", "CachedEmbeddingLookup",
           "EmbeddingCacheMonitor", "prefetch_rows", "ShardedEmbeddingLookup", "ShardedTrainStep",
           "save_sharded_table", "load_sharded_table", "ShardedRunCheckpoint", "restore_sharded_run", "LogRows"]
