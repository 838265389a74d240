"""FileReader and the shard-set view used by MindDataset: memory-mapped pages, checked once.

Files are checked when opened (header, footer checksum, page table) and each page's crc32 when
it is first read, so a corrupt page raises RecordFileError naming the file and the page. The
files are memory-mapped: they must not be truncated or rewritten in place while a reader has
them open (writers never do that: they replace files by renaming).
"""
import bisect
import json
import mmap
import os
import threading
import zlib

import numpy as np

from ..errors import RecordFileError
from .format import END_MAGIC, MAGIC, TRAILER, Field, decode_segment

__all__ = ["ShardFile", "RecordSet", "FileReader"]


class ShardFile:
    """One shard file: its footer, its page table, lazily verified and decoded pages."""

    def __init__(self, path):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise RecordFileError(f"{self.path}: no such record file")
        self.size = os.path.getsize(self.path)
        with open(self.path, "rb") as handle:
            self.meta_offset, self.meta = self._read_footer(handle)
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        self._view = memoryview(self._map)
        self.fields = [Field(name, spec) for name, spec in self.meta["schema"].items()]
        self.pages = self.meta["pages"]
        self._check_page_table()
        self._decoded = {}
        self._row_views = {}
        self._lock = threading.Lock()

    def _fail(self, message):
        raise RecordFileError(f"{self.path}: {message}")

    def _read_footer(self, handle):
        if self.size < len(MAGIC) + TRAILER.size or handle.read(len(MAGIC)) != MAGIC:
            self._fail("not a record file (no record header); it may be truncated or of another format")
        handle.seek(self.size - TRAILER.size)
        meta_offset, meta_length, meta_crc, end = TRAILER.unpack(handle.read(TRAILER.size))
        if end != END_MAGIC:
            self._fail("truncated or unfinished record file (no valid footer)")
        if meta_offset + meta_length + TRAILER.size != self.size:
            self._fail("corrupt footer (its offsets do not match the file size)")
        handle.seek(meta_offset)
        blob = handle.read(meta_length)
        if zlib.crc32(blob) != meta_crc:
            self._fail("corrupt footer (checksum mismatch)")
        try:
            return meta_offset, json.loads(blob.decode("utf-8"))
        except ValueError:
            self._fail("corrupt footer (not valid JSON)")

    def _check_page_table(self):
        for number, page in enumerate(self.pages):
            if page["offset"] + page["length"] > self.meta_offset:
                self._fail(f"page {number} lies beyond the data region (corrupt page table)")

    def _verified_bytes(self, entry, what):
        start, length = entry["offset"], entry["length"]
        blob = self._view[start:start + length]
        if zlib.crc32(blob) != entry["crc"]:
            self._fail(f"{what} (bytes {start}..{start + length}) is corrupt: checksum mismatch")
        return blob

    def page(self, number):
        """{field: decoded segment} of page `number`, checksum-verified on first use."""
        decoded = self._decoded.get(number)
        if decoded is not None:
            return decoded
        with self._lock:
            if number not in self._decoded:
                entry = self.pages[number]
                blob = self._verified_bytes(entry, f"page {number}")
                self._decoded[number] = {
                    field.name: decode_segment(field, blob[rel:rel + size], entry["rows"])
                    for field, (rel, size) in zip(self.fields, entry["segments"])}
            return self._decoded[number]

    def row_view(self, row_nbytes):
        """The data region as a (bytes // row_nbytes, row_nbytes) uint8 array: row-addressable
        fixed fields (see format.py) read any row as one row of it."""
        view = self._row_views.get(row_nbytes)
        if view is None:
            count = self.meta_offset // row_nbytes
            view = np.frombuffer(self._map, np.uint8, count=count * row_nbytes).reshape(count, row_nbytes)
            self._row_views[row_nbytes] = view
        return view

    def verify(self):
        """Check every page's and index's checksum (pages are otherwise checked on first read)."""
        for number in range(len(self.pages)):
            self.page(number)
        for name, entry in self.meta["indexes"].items():
            self._verified_bytes(entry, f"index of field '{name}'")

    def index(self, name):
        """(keys, counts, global row ids grouped by key) of an indexed field."""
        entry = self.meta["indexes"][name]
        blob = self._verified_bytes(entry, f"index of field '{name}'")
        (c_rel, c_len), (r_rel, r_len) = entry["segments"][:2]
        counts = np.frombuffer(blob[c_rel:c_rel + c_len], dtype=np.int64)
        rows = np.frombuffer(blob[r_rel:r_rel + r_len], dtype=np.int64)
        if "keys" in entry:
            return entry["keys"], counts, rows
        field = next(f for f in self.fields if f.name == name)
        k_rel, k_len = entry["segments"][2]
        return np.frombuffer(blob[k_rel:k_rel + k_len], dtype=field.dtype), counts, rows

    def close(self):
        self._decoded, self._row_views = {}, {}
        for release in (self._view.release, self._map.close):
            try:
                release()
            except BufferError:
                pass  # arrays handed out still view the map; it closes when they are gone


def _expand_files(file_name):
    """The shard files of a dataset: every shard named in the footer of `file_name`, or a list."""
    if isinstance(file_name, (list, tuple)):
        return [ShardFile(path) for path in file_name]
    first = ShardFile(file_name)
    folder = os.path.dirname(os.path.abspath(first.path))
    shards = []
    for shard_id, name in enumerate(first.meta["shard_files"]):
        path = os.path.join(folder, name)
        # the named file is its own shard even when renamed or copied (never read the original)
        if shard_id == first.meta["shard_id"] or os.path.abspath(path) == os.path.abspath(first.path):
            shards.append(first)
        elif not os.path.exists(path):
            raise RecordFileError(f"{path}: shard {len(shards)} of {first.path} is missing")
        else:
            shards.append(ShardFile(path))
    return shards


class RecordSet:
    """The rows of one or more shard files in global row order (renumbered 0..n-1)."""

    def __init__(self, file_name):
        self.shards = _expand_files(file_name)
        first = self.shards[0]
        for shard in self.shards[1:]:
            if shard.meta["schema"] != first.meta["schema"]:
                raise RecordFileError(f"{shard.path}: schema differs from {first.path}")
            if shard.meta["dataset_id"] != first.meta["dataset_id"] and not isinstance(file_name, (list, tuple)):
                raise RecordFileError(f"{shard.path}: belongs to another write than {first.path} "
                                      "(an interrupted or mixed commit)")
        self.fields = first.fields
        self.schema = dict(first.meta["schema"])
        self.index_fields = list(first.meta["index_fields"])
        table = sorted((page["row"], page["rows"], s, p) for s, shard in enumerate(self.shards)
                       for p, page in enumerate(shard.pages))
        self._page_refs = [(s, p) for _, _, s, p in table]
        self._global_starts = np.array([row for row, _, _, _ in table], dtype=np.int64)
        counts = np.array([rows for _, rows, _, _ in table], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._start_list = self._starts.tolist()
        self._by_name = {f.name: f for f in self.fields}
        self._page_shard = np.array([s for s, _ in self._page_refs], dtype=np.int64)
        self._verified = np.zeros(len(self._page_refs), dtype=bool)
        self._row_base = {f.name: base for k, f in enumerate(self.fields)
                          if (base := self._row_addresses(k, f)) is not None}
        self.num_rows = int(self._starts[-1])
        if not isinstance(file_name, (list, tuple)) and self.num_rows != first.meta["num_rows"]:
            raise RecordFileError(f"{first.path}: the shards hold {self.num_rows} rows, the footer says "
                                  f"{first.meta['num_rows']}")

    def _row_addresses(self, k, field):
        """Per page, the row of `shard.row_view` holding its first value of field k (or None
        when the field's segments are not row-aligned in every page)."""
        if not field.fixed or field.row_nbytes == 0:
            return None
        bases = []
        for s, p in self._page_refs:
            page = self.shards[s].pages[p]
            where = page["offset"] + page["segments"][k][0]
            if where % field.row_nbytes:
                return None
            bases.append(where // field.row_nbytes)
        return np.array(bases, dtype=np.int64)

    @property
    def num_pages(self):
        return len(self._page_refs)

    def page_rows(self, number):
        """(first row, row count) of global page `number`."""
        return int(self._starts[number]), int(self._starts[number + 1] - self._starts[number])

    def page(self, number):
        s, p = self._page_refs[number]
        return self.shards[s].page(p)

    def field(self, name):
        field = self._by_name.get(name)
        if field is not None:
            return field
        raise RecordFileError(f"{self.shards[0].path}: no field '{name}'; fields are {list(self.schema)}")

    def gather(self, ids, names, as_numpy=False):
        """{name: column} for rows `ids` (an int array or a slice): an ndarray (rows, *shape)
        for fixed-shape fields, a list of values for variable ones. Contiguous rows are copied
        page slice by page slice; scattered rows of row-addressable fields with one fancy index."""
        fields = [self.field(n) for n in names]
        if isinstance(ids, slice):
            start, stop, step = ids.indices(self.num_rows)
            if step != 1:
                return self.gather(np.arange(start, stop, step), names, as_numpy)
            return self._gather_planned(self._range_plan(start, stop), max(0, stop - start), fields, as_numpy)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.num_rows):
            raise IndexError(f"row ids must be in [0, {self.num_rows}), got {ids.min()}..{ids.max()}")
        if len(ids) and ids[-1] - ids[0] == len(ids) - 1 and np.all(np.diff(ids) == 1):
            return self._gather_planned(self._range_plan(int(ids[0]), int(ids[-1]) + 1), len(ids),
                                        fields, as_numpy)
        if any(f.name in self._row_base for f in fields):
            return self._gather_addressed(ids, fields, as_numpy)
        return self._gather_planned(self._plan(ids), len(ids), fields, as_numpy)

    def _gather_planned(self, plan, count, fields, as_numpy):
        pages = [(self.page(p), targets, local) for p, targets, local in plan]
        return {f.name: (_gather_fixed(f, pages, count) if f.fixed else _gather_var(f, pages, count, as_numpy))
                for f in fields}

    def _gather_addressed(self, ids, fields, as_numpy):
        """Scattered rows: one fancy index per row-addressable field and shard, no page loop."""
        pages = np.searchsorted(self._starts, ids, side="right") - 1
        unchecked = pages[~self._verified[pages]]
        for p in np.unique(unchecked).tolist():
            self.page(p)                       # verifies the checksum once
            self._verified[p] = True
        out, rest = {}, []
        local = ids - self._starts[pages]
        for f in fields:
            base = self._row_base.get(f.name)
            if base is None:
                rest.append(f.name)
                continue
            address = base[pages] + local
            out[f.name] = self._take_rows(f, address, self._page_shard[pages])
        if rest:
            out.update(self.gather(ids, rest, as_numpy))  # variable or unaligned fields
        return {f.name: out[f.name] for f in fields}

    def _take_rows(self, field, address, shard_of):
        if len(self.shards) == 1:
            rows = self.shards[0].row_view(field.row_nbytes)[address]
        else:
            rows = np.empty((len(address), field.row_nbytes), np.uint8)
            for s in np.unique(shard_of).tolist():
                mask = shard_of == s
                rows[mask] = self.shards[s].row_view(field.row_nbytes)[address[mask]]
        return rows.view(field.dtype).reshape((len(address),) + field.row_shape)

    def _range_plan(self, start, stop):
        """(page, target slice, local slice) for the contiguous rows [start, stop)."""
        plan, done = [], 0
        first = bisect.bisect_right(self._start_list, start) - 1
        for p in range(first, self.num_pages):
            page_start, page_stop = self._start_list[p], self._start_list[p + 1]
            if page_start >= stop:
                break
            lo, hi = max(start, page_start), min(stop, page_stop)
            plan.append((p, slice(done, done + hi - lo), slice(lo - page_start, hi - page_start)))
            done += hi - lo
        return plan

    def _plan(self, ids):
        """(page, target positions, local row ids) groups covering scattered `ids`."""
        if not len(ids):
            return []
        pages = np.searchsorted(self._starts, ids, side="right") - 1
        order = np.argsort(pages, kind="stable")
        cuts = np.flatnonzero(np.diff(pages[order])) + 1
        return [(int(pages[group[0]]), group, ids[group] - self._starts[pages[group[0]]])
                for group in np.split(order, cuts)]

    def find(self, name, value):
        """Row ids (ascending) whose indexed field `name` equals `value`."""
        if name not in self.index_fields:
            raise RecordFileError(f"{self.shards[0].path}: field '{name}' is not indexed; "
                                  f"indexed fields: {self.index_fields}")
        hits = []
        for shard in self.shards:
            keys, counts, rows = shard.index(name)
            position = _key_position(keys, value)
            if position is not None:
                begin = int(counts[:position].sum())
                hits.append(rows[begin:begin + int(counts[position])])
        global_ids = np.sort(np.concatenate(hits)) if hits else np.zeros(0, np.int64)
        return self._to_local(global_ids)

    def _to_local(self, global_ids):
        pages = np.searchsorted(self._global_starts, global_ids, side="right") - 1
        return (self._starts[pages] + global_ids - self._global_starts[pages]).astype(np.int64)

    def close(self):
        for shard in self.shards:
            shard.close()


def _gather_fixed(field, pages, count):
    if len(pages) == 1:  # one page: a single copy (its targets are then all rows, in order)
        page, _, local = pages[0]
        column = page[field.name][local]
        return column.copy() if isinstance(local, slice) else column
    out = np.empty((count,) + field.row_shape, field.dtype)
    for page, targets, local in pages:
        out[targets] = page[field.name][local]
    return out


def _gather_var(field, pages, count, as_numpy):
    out = [None] * count
    for page, targets, local in pages:
        column = page[field.name]
        rows = range(local.start, local.stop) if isinstance(local, slice) else local.tolist()
        positions = range(targets.start, targets.stop) if isinstance(targets, slice) else targets.tolist()
        for k, i in zip(positions, rows):
            out[k] = column.value(i, as_numpy)
    return out


def _key_position(keys, value):
    if isinstance(keys, list):
        return keys.index(value) if isinstance(value, str) and value in keys else None
    if not len(keys):
        return None
    position = int(np.searchsorted(keys, value))
    return position if position < len(keys) and keys[position] == value else None


class FileReader:
    """Read a record dataset written by FileWriter.

    file_name: one shard file (its sibling shards are found from its footer) or a list of
    shard files. Iterating (or `get_next()`) yields one dict per row in row order; numeric
    fields come back as numpy values, strings as str, bytes as bytes. `reader[i]` reads row i,
    `read_rows(ids)` reads columns of many rows at once, `find(field, value)` /
    `lookup(field, value)` use the index built by `FileWriter.add_index`.
    """

    def __init__(self, file_name, num_consumer=4, columns=None, operator=None):
        self._set = RecordSet(file_name)
        self.columns = list(self._set.schema) if columns is None else list(columns)
        for name in self.columns:
            self._set.field(name)
        if isinstance(num_consumer, bool) or not isinstance(num_consumer, int) or num_consumer < 1:
            raise ValueError(f"FileReader: num_consumer must be an int >= 1, got {num_consumer!r}")
        self.num_consumer = num_consumer

    def __len__(self):
        return self._set.num_rows

    def schema(self):
        """{field: {'type': ..., 'shape': [...]}} as written."""
        return dict(self._set.schema)

    def footer(self):
        """The metadata the writer stored (shard_files, page_size, desc, num_rows, ...)."""
        return dict(self._set.shards[0].meta)

    @property
    def index_fields(self):
        return list(self._set.index_fields)

    @property
    def num_pages(self):
        return self._set.num_pages

    @property
    def shard_files(self):
        return [shard.path for shard in self._set.shards]

    def page_table(self):
        """[(file, page within the file, first row, rows, bytes)] in row order."""
        table = []
        for number, (s, p) in enumerate(self._set._page_refs):
            first, rows = self._set.page_rows(number)
            table.append((self._set.shards[s].path, p, first, rows, self._set.shards[s].pages[p]["length"]))
        return table

    def read_rows(self, ids, columns=None):
        """{field: column} for many rows: stacked arrays for fixed-shape fields, else lists."""
        return self._set.gather(ids, self.columns if columns is None else columns)

    def _rows_of_page(self, number):
        first, count = self._set.page_rows(number)
        columns = self._set.gather(np.arange(first, first + count), self.columns)
        return [{name: columns[name][i] for name in self.columns} for i in range(count)]

    def get_next(self):
        """Generator of row dicts, pages decoded on `num_consumer` threads, order kept."""
        from ..dataset._workers import ordered_map  # local: mstrain.dataset imports this package
        pages = ordered_map(self._rows_of_page, range(self._set.num_pages), self.num_consumer)
        for rows in pages:
            yield from rows

    def __iter__(self):
        return self.get_next()

    def __getitem__(self, row):
        if isinstance(row, (bool, np.bool_)) or not isinstance(row, (int, np.integer)):
            raise TypeError(f"FileReader: row id must be an int, got {row!r}")
        if row < 0:
            row += len(self)
        columns = self._set.gather([row], self.columns)
        return {name: columns[name][0] for name in self.columns}

    def find(self, field, value):
        """Row ids (ascending) whose indexed `field` equals `value`."""
        return self._set.find(field, value)

    def lookup(self, field, value):
        """The rows (dicts) whose indexed `field` equals `value`."""
        return [self[int(i)] for i in self.find(field, value)]

    def verify(self):
        """Check every page's checksum now; raises RecordFileError naming file and page."""
        for shard in self._set.shards:
            shard.verify()

    def close(self):
        self._set.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
