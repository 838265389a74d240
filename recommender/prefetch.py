"""Next-batch row prefetch: while a step computes, the rows the next batch will miss are read from
the slow level (host table or disk) into a staging area of each cached table.

    train_set = prefetch_rows(train_set, {net.embedding: ("ids",), net.wide_weight: ("ids", "dense_ids")})
    Model(step).train(epochs, train_set, dataset_sink_mode=True)

The data pipeline produces batches ahead of the step (in sink mode a queue holds the sink's next
batches; the dataset iterator prefetches too), and as it produces each batch it announces the
batch's ids to the tables (`CachedEmbeddingLookup.announce`). When the step then makes a batch
resident, the table knows the batch after it and stages that batch's uncached rows in a background
thread (`CachedEmbeddingLookup.prefetch`) during the step's forward, backward and update. Rows
outside the cache change only when the next `make_resident` swaps rows, so staged rows are always
current: training gives exactly the numbers it gives without prefetch.
"""
__all__ = ["prefetch_rows"]


def prefetch_rows(dataset, tables):
    """`dataset` (batched) with a pass-through map that announces each batch's ids to `tables`:
    {CachedEmbeddingLookup: column names whose values, joined along axis 1, are its ids (the
    order its lookup receives them)}. The map runs on one worker, so announcements keep the
    batch order."""
    names = list(dataset.get_col_names())
    for table, columns in tables.items():
        missing = [c for c in columns if c not in names]
        if missing:
            raise ValueError(f"prefetch_rows: the dataset has no column {missing[0]!r} for "
                             f"{type(table).__name__} (columns: {names})")
    plan = [(table, [names.index(c) for c in columns]) for table, columns in tables.items()]

    def announce(*values):
        for table, where in plan:
            table.announce(*(values[k] for k in where))
        return values

    return dataset.map(announce, input_columns=names, num_parallel_workers=1)
