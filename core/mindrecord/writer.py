"""FileWriter: rows -> pages -> shard files, committed atomically."""
import json
import os
import uuid
import zlib

import numpy as np

from ..errors import RecordFileError
from .format import (ALIGN, END_MAGIC, FORMAT_VERSION, MAGIC, ROW_ADDRESS_LIMIT, TRAILER, aligned,
                     encode_segment, parse_schema)

__all__ = ["DEFAULT_PAGE_SIZE", "shard_file_names", "FileWriter"]


DEFAULT_PAGE_SIZE = 4 << 20


def shard_file_names(file_name, shard_num):
    """The files a dataset of `shard_num` shards occupies (MindSpore: name, or name0..nameN-1)."""
    file_name = os.fspath(file_name)
    return [file_name] if shard_num == 1 else [f"{file_name}{i}" for i in range(shard_num)]


class _ShardOut:
    """One shard being written to a temporary file next to its final name."""

    def __init__(self, final_path, token):
        self.final_path = final_path
        folder, base = os.path.split(os.path.abspath(final_path))
        self.temp_path = os.path.join(folder, f".{base}.{token}.tmp")
        self.handle = None
        self.pages = []
        self.index_keys = {}   # field -> list of key arrays/lists
        self.index_rows = []   # global row ids of this shard's rows, in write order

    def open(self):
        if self.handle is None:
            self.handle = open(self.temp_path, "wb")
            self.handle.write(MAGIC.ljust(ALIGN, b"\0"))

    def write_blob(self, parts, aligns=None):
        """Append parts, part k starting at a file offset that is a multiple of aligns[k]
        (default ALIGN); return (offset, length, crc32, [[offset in blob, bytes] per part])."""
        self.open()
        start = self.handle.tell()
        if start % ALIGN:  # every blob starts aligned, so frombuffer views are aligned too
            self.handle.write(b"\0" * (aligned(start) - start))
            start = aligned(start)
        crc, pos, rel = 0, 0, []
        for part, align in zip(parts, aligns or [ALIGN] * len(parts)):
            pad = b"\0" * ((-(start + pos)) % align)
            for chunk in (pad, part):
                self.handle.write(chunk)
                crc = zlib.crc32(chunk, crc)
            pos += len(pad)
            rel.append([pos, len(part)])
            pos += len(part)
        return start, pos, crc, rel


def _segment_align(field):
    """Fixed-shape rows up to 64 KiB start at file offsets divisible by the row size, so a reader
    can address any row of the file as one row of a (file bytes / row size) array."""
    if field.fixed and field.row_nbytes <= ROW_ADDRESS_LIMIT:
        return field.row_nbytes
    return ALIGN


class FileWriter:
    """Write rows into record files (the MindRecord workflow).

        writer = FileWriter("train.rec", shard_num=2)
        writer.add_schema({"image": {"type": "uint8", "shape": [28, 28]}, "label": {"type": "int64"}})
        writer.add_index(["label"])
        writer.write_raw_data([{"image": img, "label": 3}, ...])   # any number of calls
        writer.commit()

    Types: int32, int64, float32, float64 (and uint8, int8, int16, float16), string, bytes;
    numeric fields may have a shape, variable in its first dimension with -1. Rows are gathered
    into pages of about `page_size` bytes, pages are spread over the shards round-robin (the last
    rows, less than a page, are divided over all shards) and carry crc32 checksums. Nothing appears under the final names before `commit()`, which
    writes temporary files, fsyncs and renames them. An existing file is only replaced with
    overwrite=True.
    """

    def __init__(self, file_name, shard_num=1, overwrite=False, page_size=DEFAULT_PAGE_SIZE):
        if isinstance(shard_num, bool) or not isinstance(shard_num, int) or not 1 <= shard_num <= 1000:
            raise RecordFileError(f"FileWriter: shard_num must be an int in [1, 1000], got {shard_num!r}")
        self.file_names = shard_file_names(file_name, shard_num)
        self.overwrite = bool(overwrite)
        self._refuse_existing()
        self._token = uuid.uuid4().hex
        self._shards = [_ShardOut(path, self._token[:12]) for path in self.file_names]
        self._fields = None
        self._index_fields = []
        self._pending = []          # blocks: dict field -> stacked array | list of stored values
        self._pending_rows = 0
        self._pending_bytes = 0
        self._rows_written = 0
        self._pages_written = 0
        self._committed = False
        self.set_page_size(page_size)

    @classmethod
    def open_for_append(cls, file_name):
        """A writer that adds rows to the committed record set `file_name` (any of its shards),
        with its schema, index fields, shard count and page size. Its rows come first, in order,
        then the new ones; `commit()` replaces the whole set atomically (the old files stay
        intact until then), so an append rewrites the set: its cost grows with the set's size."""
        from .reader import FileReader
        reader = FileReader(file_name)
        shards = reader.shard_files
        meta = reader.footer()
        folder = os.path.dirname(os.path.abspath(os.fspath(file_name)))
        base = os.path.join(folder, meta["shard_files"][0])
        if len(shards) > 1:
            base = base[:-1]  # shard files are <name>0 .. <name>N-1
        writer = cls(base, shard_num=len(shards), overwrite=True, page_size=meta["page_size"])
        writer.add_schema(reader.schema(), meta.get("desc"))
        if reader.index_fields:
            writer.add_index(reader.index_fields)
        batch = []
        for row in reader:
            batch.append(row)
            if len(batch) == 1024:
                writer.write_raw_data(batch)
                batch = []
        if batch:
            writer.write_raw_data(batch)
        return writer

    def _refuse_existing(self):
        if self.overwrite:
            return
        for path in self.file_names:
            if os.path.exists(path):
                raise RecordFileError(f"{path}: file exists; pass overwrite=True (mstrain data convert --overwrite) to replace it")

    def set_page_size(self, page_size):
        """Target page size in bytes (a page holds at least one row)."""
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise RecordFileError(f"FileWriter: page_size must be a positive int, got {page_size!r}")
        self.page_size = page_size

    def add_schema(self, content, desc=None):
        """Set the schema {field: {'type': ..., 'shape': [...]}} (once, before writing)."""
        if self._fields is not None:
            raise RecordFileError("add_schema: the schema is already set")
        self._fields = parse_schema(content)
        self._desc = desc
        return 0

    def add_index(self, index_fields):
        """Index scalar numeric or string fields for lookup by value (FileReader.find)."""
        fields = self._require_schema()
        names = [index_fields] if isinstance(index_fields, str) else list(index_fields)
        by_name = {f.name: f for f in fields}
        for name in names:
            if name not in by_name:
                raise RecordFileError(f"add_index: field '{name}' is not in the schema {list(by_name)}")
            if not by_name[name].indexable:
                raise RecordFileError(f"add_index: field '{name}' ({by_name[name].type}"
                                      f"{' shape ' + str(by_name[name].shape) if by_name[name].shape else ''}) "
                                      "cannot be indexed; index scalar numeric or string fields")
        self._index_fields += [n for n in names if n not in self._index_fields]

    def _require_schema(self):
        if self._fields is None:
            raise RecordFileError("FileWriter: call add_schema before add_index or writing rows")
        if self._committed:
            raise RecordFileError(f"{self.file_names[0]}: already committed")
        return self._fields

    # -- writing -------------------------------------------------------------------------------
    def write_raw_data(self, raw_data, parallel_writer=False):
        """Append rows (a list of dicts with every schema field). A row that does not fit the
        schema raises RecordFileError naming the row and the field; none of the call's rows
        are kept then. `parallel_writer` (MindSpore's multi-threaded encoding switch) is
        accepted for compatibility: the rows are encoded in this thread, with the same result."""
        fields = self._require_schema()
        if isinstance(raw_data, dict):
            raw_data = [raw_data]
        names = {f.name for f in fields}
        columns = {f.name: [] for f in fields}
        for r, row in enumerate(raw_data):
            if not isinstance(row, dict):
                raise RecordFileError(f"write_raw_data: row {r} is a {type(row).__name__}, not a dict")
            unknown = [k for k in row if k not in names]
            if unknown:
                raise RecordFileError(f"write_raw_data: row {r} has field '{unknown[0]}' that is "
                                      f"not in the schema {sorted(names)}")
            for field in fields:
                if field.name not in row:
                    raise RecordFileError(f"write_raw_data: row {r} is missing field '{field.name}'")
                columns[field.name].append(field.check_value(row[field.name], r))
        block = {f.name: np.stack(columns[f.name]) if f.fixed and raw_data else columns[f.name]
                 for f in fields}
        self._append_block(block, len(raw_data))
        return 0

    def write_columns(self, columns):
        """Append rows given column-wise ({field: array or list}); faster for fixed fields."""
        fields = self._require_schema()
        missing = [f.name for f in fields if f.name not in columns]
        unknown = [k for k in columns if k not in {f.name for f in fields}]
        if missing or unknown:
            raise RecordFileError(f"write_columns: missing fields {missing}, unknown fields {unknown}")
        num_rows = len(columns[fields[0].name])
        block = {f.name: f.check_column(columns[f.name], num_rows) for f in fields}
        self._append_block(block, num_rows)

    def _row_bytes(self, block, num_rows):
        sizes = np.zeros(num_rows, dtype=np.int64)
        for field in self._fields:
            if field.fixed:
                sizes += field.row_nbytes
            else:
                sizes += np.fromiter((len(v) if isinstance(v, bytes) else v.nbytes
                                      for v in block[field.name]), dtype=np.int64, count=num_rows) + 8
        return sizes

    def _append_block(self, block, num_rows):
        if num_rows == 0:
            return
        self._pending.append((block, self._row_bytes(block, num_rows)))
        self._pending_rows += num_rows
        self._pending_bytes += int(self._pending[-1][1].sum())
        if self._pending_bytes >= self.page_size:
            self._flush_pages(final=False)

    def _merged_pending(self):
        blocks = [b for b, _ in self._pending]
        merged = {}
        for field in self._fields:
            parts = [b[field.name] for b in blocks]
            merged[field.name] = (np.concatenate(parts) if field.fixed
                                  else [v for part in parts for v in part])
        return merged, np.concatenate([s for _, s in self._pending])

    def _flush_pages(self, final):
        """Cut the pending rows into pages of ~page_size; keep a partial page unless final. The
        final rows (less than a page) become one page per shard, so every shard gets its share
        of a small write, as MindSpore's writer divides each write over the shards."""
        merged, sizes = self._merged_pending()
        ends = np.cumsum(sizes)
        if final and ends[-1] < self.page_size * len(self._shards):
            return self._spread_last_pages(merged, ends)
        start = 0
        while start < len(sizes):
            budget = (ends[start - 1] if start else 0) + self.page_size
            stop = max(start + 1, int(np.searchsorted(ends, budget, side="right")))
            if stop >= len(sizes) and not final and ends[-1] - (ends[start - 1] if start else 0) < self.page_size:
                break
            self._write_page({k: v[start:stop] for k, v in merged.items()}, stop - start)
            start = stop
        rest = {k: v[start:] for k, v in merged.items()}
        self._pending = [(rest, sizes[start:])] if start < len(sizes) else []
        self._pending_rows = len(sizes) - start
        self._pending_bytes = int(sizes[start:].sum())

    def _spread_last_pages(self, merged, ends):
        """The last rows as one page per shard, cut at equal shares of their bytes (rows of one
        size: shard k gets rows [n k / S, n (k + 1) / S), as MindSpore divides a write)."""
        shards = len(self._shards)
        stops = [int(np.searchsorted(ends, ends[-1] * k / shards, side="right")) for k in range(1, shards)]
        start = 0
        for shard, stop in zip(self._shards, stops + [len(ends)]):
            if stop > start:
                self._write_page({k: v[start:stop] for k, v in merged.items()}, stop - start, shard)
                start = stop
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0

    def _write_page(self, columns, num_rows, shard=None):
        if shard is None:
            shard = self._shards[self._pages_written % len(self._shards)]
        parts = []
        for field in self._fields:
            segment = encode_segment(field, columns[field.name])
            parts.append(segment[0] if len(segment) == 1 else b"".join(segment))
        offset, length, crc, rel = shard.write_blob(parts, [_segment_align(f) for f in self._fields])
        shard.pages.append({"row": self._rows_written, "rows": num_rows, "offset": offset,
                            "length": length, "crc": crc, "segments": rel})
        for name in self._index_fields:
            shard.index_keys.setdefault(name, []).append(columns[name])
        shard.index_rows.append(np.arange(self._rows_written, self._rows_written + num_rows))
        self._rows_written += num_rows
        self._pages_written += 1

    # -- commit --------------------------------------------------------------------------------
    def commit(self):
        """Finish every shard (index, footer, fsync) and move them to their final names."""
        self._require_schema()
        if self._pending_rows:
            self._flush_pages(final=True)
        try:
            for shard_id, shard in enumerate(self._shards):
                self._finish_shard(shard_id, shard)
            self._refuse_existing()
            for shard in self._shards:
                os.replace(shard.temp_path, shard.final_path)
            _fsync_dir(os.path.dirname(os.path.abspath(self.file_names[0])))
        except BaseException:
            self._discard_temps()
            raise
        self._committed = True
        return 0

    def _finish_shard(self, shard_id, shard):
        shard.open()
        indexes = {name: self._write_index(shard, name) for name in self._index_fields}
        meta = {
            "format": "mstrain-record", "version": FORMAT_VERSION, "dataset_id": self._token,
            "shard_id": shard_id, "shard_num": len(self._shards),
            "shard_files": [os.path.basename(s.final_path) for s in self._shards],
            "schema": {f.name: f.spec() for f in self._fields}, "index_fields": self._index_fields,
            "num_rows": self._rows_written, "page_size": self.page_size, "desc": self._desc,
            "pages": shard.pages, "indexes": indexes,
        }
        blob = json.dumps(meta, separators=(",", ":")).encode("utf-8")
        offset = shard.handle.tell()
        shard.handle.write(blob)
        shard.handle.write(TRAILER.pack(offset, len(blob), zlib.crc32(blob), END_MAGIC))
        shard.handle.flush()
        os.fsync(shard.handle.fileno())
        shard.handle.close()

    def _write_index(self, shard, name):
        field = next(f for f in self._fields if f.name == name)
        chunks = shard.index_keys.get(name, [])
        rows = np.concatenate(shard.index_rows) if shard.index_rows else np.zeros(0, np.int64)
        if field.numeric:
            keys = np.concatenate(chunks) if chunks else np.zeros(0, field.dtype)
        else:
            keys = np.array([bytes(v).decode("utf-8") for chunk in chunks for v in chunk], dtype=object)
        uniques, inverse = np.unique(keys, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        counts = np.bincount(inverse, minlength=len(uniques)).astype(np.int64)
        parts = [counts.tobytes(), rows[order].astype(np.int64).tobytes()]
        entry = {"unique": len(uniques)}
        if field.numeric:
            parts.append(np.ascontiguousarray(uniques).tobytes())
        else:
            entry["keys"] = [str(k) for k in uniques]
        offset, length, crc, rel = shard.write_blob(parts)
        entry.update({"offset": offset, "length": length, "crc": crc, "segments": rel})
        return entry

    def _discard_temps(self):
        for shard in self._shards:
            if shard.handle is not None and not shard.handle.closed:
                shard.handle.close()
            if os.path.exists(shard.temp_path):
                os.remove(shard.temp_path)


def _fsync_dir(folder):
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the renames are still atomic
    finally:
        os.close(fd)
