"""Checkpoints of a widedeep run with sharded tables, resumable on any number of ranks.

    saver = ShardedRunCheckpoint(directory, step, {"deep": net.embedding, ...}, every_steps=100, keep=2)
    Model(step).train(epochs, data, callbacks=[saver, ...])
    resume_from, history = restore_sharded_run(directory, "latest", step, tables)   # a fresh run, any ranks
    Model(step).train(epochs, data, callbacks=[...], resume_from=resume_from)

Layout of `directory`:
    step-<global step>/<table>/     each table's shards and its optimizer's row state (`save_sharded_table`)
    step-<global step>/dense.ckpt   rank 0: the dense parameters with their optimizers' state, the run's
                                    position (step, epoch, RNG, data position) and the history so far
    latest.json                     {"step": ..., "directory": "step-..."}, written last: the commit

Every file is written atomically and a table is streamed chunk by chunk, so no process ever holds
a whole table. A save that did not finish is never named by latest.json; the `keep` newest
committed saves are kept. A run resumed on M ranks from a save on N continues exactly (the data
are split the same way on any rank count: see `jobs.train_widedeep`).
"""
import json
import os
import shutil

import mstrain as ms
from mstrain.communication import barrier, get_rank
from mstrain.errors import CheckpointError
from mstrain.fileio import write_json_atomically
from mstrain.train import Callback, resume_info

from .sharded_checkpoint import load_sharded_table, save_sharded_table

__all__ = ["ShardedRunCheckpoint", "restore_sharded_run"]

_LATEST = "latest.json"
_DENSE = "dense.ckpt"


def _table_optimizers(step, tables):
    """{table name: (table, its optimizer)} of a ShardedTrainStep."""
    optimizer_of = {id(t): opt for t, opt in zip(step.tables, step.table_optimizers)}
    return {name: (table, optimizer_of[id(table)]) for name, table in tables.items()}


def _dense_state(step):
    """{name: Parameter} of the dense optimizers: the parameters they train and their state."""
    return {param.name: param for optimizer in step.dense_optimizers for _, param in optimizer.parameters_and_names()}


class ShardedRunCheckpoint(Callback):
    """Save the run every `every_steps` global steps (0: at each epoch end) under `directory`
    (module doc); collective: every rank runs it. `history`: the list the run's evaluations
    append to, saved with the position so a resumed run reports every epoch."""

    def __init__(self, directory, step, tables, every_steps=0, keep=2, history=None):
        super().__init__()
        self.directory, self.step, self.every_steps, self.keep = os.fspath(directory), step, int(every_steps), int(keep)
        self.tables = _table_optimizers(step, tables)
        self.history = history if history is not None else []
        self.saved = []  # global steps saved by this run

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        if self.every_steps and args.cur_step_num % self.every_steps == 0:
            self.save(args)

    def on_train_epoch_end(self, run_context):
        if not self.every_steps:
            self.save(run_context.original_args())

    def save(self, args):
        name = f"step-{args.cur_step_num:08d}"
        path = os.path.join(self.directory, name)
        for table_name, (table, optimizer) in self.tables.items():
            save_sharded_table(os.path.join(path, table_name), table, optimizer)
        if get_rank() == 0:
            append = {**resume_info(args), "history": list(self.history)}
            ms.save_checkpoint(_dense_state(self.step), os.path.join(path, _DENSE), append_dict=append)
            write_json_atomically(os.path.join(self.directory, _LATEST), {"step": args.cur_step_num, "directory": name})
            self._remove_older(name)
        barrier()
        self.saved.append(args.cur_step_num)

    def _remove_older(self, newest):
        committed = sorted(n for n in os.listdir(self.directory) if n.startswith("step-") and n <= newest)
        for name in committed[:-self.keep] if self.keep else []:
            shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)


def _resolve(directory, which):
    """The step directory `which` names: "latest" (latest.json's), or a path."""
    if which != "latest":
        return os.fspath(which)
    path = os.path.join(directory, _LATEST)
    try:
        with open(path) as handle:
            return os.path.join(directory, json.load(handle)["directory"])
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file (no committed checkpoint to resume from)") from None


def restore_sharded_run(directory, which, step, tables):
    """Load a ShardedRunCheckpoint save ("latest" in `directory`, or a step directory's path) into
    `step` (a ShardedTrainStep) and its `tables` on this run's ranks; returns (the `resume_from`
    dict for Model.train, the saved history). Collective."""
    path = _resolve(directory, which)
    dense_path = os.path.join(path, _DENSE)
    if not os.path.isfile(dense_path):
        raise CheckpointError(f"{dense_path}: no such file (not a widedeep checkpoint, or its save did not finish)")
    for table_name, (table, optimizer) in _table_optimizers(step, tables).items():
        load_sharded_table(os.path.join(path, table_name), table, optimizer)
    saved = ms.load_checkpoint(dense_path)
    # the tables are loaded already: Model.train's resume loads them onto themselves
    resume_from = {param.name: param for _, param in step.parameters_and_names()}
    resume_from.update(saved)
    return resume_from, list(saved.get("history") or [])
