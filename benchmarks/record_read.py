"""W9 record-read: the suite's record files vs a numpy .npy memmap vs a per-sample pickle directory.

100000 samples of (image 28x28 uint8, label int64), read back in batches of 256 on 2 reader
threads (the same harness for every format), in file order ("sequential") and in one shared
random order ("shuffled"). Each format reads its batches once to warm up while every sample is
compared byte for byte with the source; then the timed passes follow (median). Also reported for
the records: the first pass of a freshly opened reader (page checksums verified then) and the
throughput of the full `MindDataset(...).batch(256)` pipeline.

    PYTHONPATH=. python benchmarks/record_read.py [--samples N] [--repeats K] [--dir TMP]
"""
import argparse
import collections
import json
import os
import pickle
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import mstrain  # noqa: F401  (first: its BLAS thread settings must be set before numpy loads OpenBLAS)
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mstrain import dataset as ds  # noqa: E402
from mstrain.mindrecord import FileReader, FileWriter  # noqa: E402

BATCH, THREADS = 256, 2


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n).astype(np.int64)


def write_formats(folder, images, labels):
    writer = FileWriter(os.path.join(folder, "mnist.rec"))
    writer.add_schema({"image": {"type": "uint8", "shape": [28, 28]}, "label": {"type": "int64"}})
    for s in range(0, len(labels), 10000):
        writer.write_raw_data([{"image": images[i], "label": labels[i]}
                               for i in range(s, min(s + 10000, len(labels)))])
    writer.commit()
    np.save(os.path.join(folder, "images.npy"), images)
    np.save(os.path.join(folder, "labels.npy"), labels)
    pickles = os.path.join(folder, "pickles")
    os.mkdir(pickles)
    for i in range(len(labels)):
        with open(os.path.join(pickles, f"{i}.pkl"), "wb") as handle:
            pickle.dump((images[i], labels[i]), handle, protocol=pickle.HIGHEST_PROTOCOL)


def readers(folder):
    """format -> (open() -> fetch(batch) -> (images, labels)); a batch is a slice or id array."""
    def records():
        reader = FileReader(os.path.join(folder, "mnist.rec"))
        def fetch(batch):
            columns = reader.read_rows(batch)
            return columns["image"], columns["label"]
        return fetch

    def memmap():
        images = np.load(os.path.join(folder, "images.npy"), mmap_mode="r")
        labels = np.load(os.path.join(folder, "labels.npy"), mmap_mode="r")
        return lambda batch: (np.array(images[batch]), np.array(labels[batch]))

    def pickles():
        root = os.path.join(folder, "pickles")
        def fetch(batch):
            ids = range(batch.start, batch.stop) if isinstance(batch, slice) else batch.tolist()
            samples = []
            for i in ids:
                with open(os.path.join(root, f"{i}.pkl"), "rb") as handle:
                    samples.append(pickle.load(handle))
            return np.stack([s[0] for s in samples]), np.array([s[1] for s in samples])
        return fetch

    return {"records": records, "memmap": memmap, "pickle": pickles}


def run_pass(fetch, batches):
    """Read every batch on THREADS threads, a few batches ahead, in order; return (seconds, batches)."""
    out, pending = [], collections.deque()
    start = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        for batch in batches:
            pending.append(pool.submit(fetch, batch))
            if len(pending) >= 4 * THREADS:
                out.append(pending.popleft().result())
        out.extend(p.result() for p in pending)
    return time.perf_counter() - start, out


def identical(results, batches, images, labels):
    for (img, lab), batch in zip(results, batches):
        if img.tobytes() != images[batch].tobytes() or lab.tobytes() != labels[batch].tobytes():
            return False
    return sum(len(lab) for _, lab in results) == len(labels)


def measure(open_reader, batches, images, labels, repeats):
    """{format: samples/s} and whether every format read back every byte. Passes of the formats
    alternate, so a change in the machine's load hits them alike; pickles get one timed pass."""
    fetchers = {name: opener() for name, opener in open_reader.items()}
    identical_all = True
    for fetch in fetchers.values():
        _, results = run_pass(fetch, batches)                   # warm-up + byte check
        identical_all &= identical(results, batches, images, labels)
        del results
    times = {name: [] for name in fetchers}
    for repeat in range(repeats):
        for name, fetch in fetchers.items():
            if name != "pickle" or repeat == 0:
                times[name].append(run_pass(fetch, batches)[0])
    return {name: len(labels) / statistics.median(t) for name, t in times.items()}, identical_all


def pipeline_speed(folder, shuffle, repeats):
    data = ds.MindDataset(os.path.join(folder, "mnist.rec"), shuffle=shuffle,
                          num_parallel_workers=THREADS, num_shards=1, shard_id=0).batch(BATCH)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        count = sum(len(lab) for _, lab in data.create_tuple_iterator(num_epochs=1, output_numpy=True))
        times.append(time.perf_counter() - start)
    return count / statistics.median(times[1:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100000)
    parser.add_argument("--repeats", type=int, default=9, help="timed passes (pickles: one)")
    parser.add_argument("--dir", default=None, help="where to make the temporary directory")
    args = parser.parse_args(argv)
    images, labels = make_data(args.samples)
    order = np.random.default_rng(1).permutation(args.samples)
    modes = {
        "sequential": [slice(s, min(s + BATCH, args.samples)) for s in range(0, args.samples, BATCH)],
        "shuffled": [order[s:s + BATCH] for s in range(0, args.samples, BATCH)],
    }
    with tempfile.TemporaryDirectory(prefix="w9-", dir=args.dir) as folder:
        write_formats(folder, images, labels)
        open_reader = readers(folder)
        for mode, batches in modes.items():
            speeds, identical_all = measure(open_reader, batches, images, labels, args.repeats)
            first_pass, _ = run_pass(open_reader["records"](), batches)
            print(json.dumps({
                "workload": "W9", "name": "record-read", "impl": "mstrain", "mode": mode,
                "speed_metric": "samples_per_s", "speed": round(speeds["records"]),
                "ratio_vs_memmap": round(speeds["records"] / speeds["memmap"], 3),
                "ratio_vs_pickle": round(speeds["records"] / speeds["pickle"], 2),
                "quality_metric": "byte_identical", "quality": identical_all,
                "memmap_speed": round(speeds["memmap"]), "pickle_speed": round(speeds["pickle"]),
                "records_first_pass_speed": round(args.samples / first_pass),
                "pipeline_speed": round(pipeline_speed(folder, mode == "shuffled", args.repeats)),
                "batch_size": BATCH, "reader_threads": THREADS, "samples": args.samples,
            }), flush=True)


if __name__ == "__main__":
    main()
