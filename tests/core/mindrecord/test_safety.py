"""Checksums, truncation, atomic commit, overwrite refusal and schema errors."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mstrain.errors import RecordFileError
from mstrain.mindrecord import FileReader, FileWriter

SCHEMA = {"x": {"type": "float32", "shape": [4]}, "label": {"type": "int64"}, "tag": {"type": "string"}}


def write(path, n=60, shard_num=1, overwrite=False, page_size=200, start=0):
    writer = FileWriter(str(path), shard_num=shard_num, overwrite=overwrite, page_size=page_size)
    writer.add_schema(SCHEMA)
    writer.write_raw_data([{"x": np.full(4, i, np.float32), "label": i, "tag": f"t{i}"}
                           for i in range(start, start + n)])
    writer.commit()
    return writer.file_names


def page_offsets(path):
    reader = FileReader(str(path))
    shard = reader._set.shards[0]
    return [(p["offset"], p["length"]) for p in shard.pages]


def flip_byte(path, offset):
    with open(path, "r+b") as handle:
        handle.seek(offset)
        value = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([value ^ 0xFF]))


def test_a_flipped_byte_names_the_file_and_the_page(tmp_path):
    path = write(tmp_path / "data.rec")[0]
    offsets = page_offsets(path)
    offset, length = offsets[2]
    flip_byte(path, offset + length // 2)
    reader = FileReader(path)
    assert int(reader[0]["label"]) == 0          # intact pages still read
    with pytest.raises(RecordFileError, match=r"data\.rec: page 2 .*checksum"):
        list(reader)
    with pytest.raises(RecordFileError, match="page 2"):
        FileReader(path).verify()


def test_a_copied_file_reads_itself_not_the_original(tmp_path):
    """A file's footer names its shard files; a copy or rename must still read its own bytes."""
    path = write(tmp_path / "data.rec")[0]
    copy = tmp_path / "copy.rec"
    copy.write_bytes(open(path, "rb").read())
    offset, length = page_offsets(copy)[1]
    flip_byte(copy, offset + length // 2)
    assert len(list(FileReader(path))) == 60      # the original is intact
    with pytest.raises(RecordFileError, match=r"copy\.rec: page 1 .*checksum"):
        list(FileReader(str(copy)))
    os.replace(copy, tmp_path / "moved.rec")
    os.unlink(path)                               # a renamed single file needs no sibling
    with pytest.raises(RecordFileError, match=r"moved\.rec: page 1"):
        FileReader(str(tmp_path / "moved.rec")).verify()


def test_a_corrupt_footer_is_reported(tmp_path):
    path = write(tmp_path / "data.rec")[0]
    flip_byte(path, os.path.getsize(path) - 40)  # inside the JSON footer
    with pytest.raises(RecordFileError, match="footer"):
        FileReader(path)


@pytest.mark.parametrize("keep", [0.5, 0.99, 10])
def test_truncated_files_are_rejected(tmp_path, keep):
    path = write(tmp_path / "data.rec")[0]
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        handle.truncate(int(size * keep) if keep < 1 else keep)
    with pytest.raises(RecordFileError, match=r"data\.rec.*(truncated|not a record file)"):
        FileReader(path)


def test_existing_files_are_refused_unless_overwrite(tmp_path):
    path = write(tmp_path / "data.rec")[0]
    with pytest.raises(RecordFileError, match=r"data\.rec: file exists"):
        FileWriter(path)
    write(tmp_path / "data.rec", n=5, overwrite=True, start=100)
    assert [int(r["label"]) for r in FileReader(path)] == [100, 101, 102, 103, 104]


def test_refusal_also_holds_for_any_shard_name(tmp_path):
    (tmp_path / "data.rec1").write_bytes(b"someone else's file")
    with pytest.raises(RecordFileError, match=r"data\.rec1"):
        FileWriter(str(tmp_path / "data.rec"), shard_num=2)


_CRASH = textwrap.dedent("""
    import os, sys
    import numpy as np
    sys.path.insert(0, sys.argv[2])
    from mstrain.mindrecord import FileWriter
    writer = FileWriter(sys.argv[1], page_size=64)
    writer.add_schema({"x": {"type": "float32", "shape": [4]}})
    writer.write_raw_data([{"x": np.zeros(4, np.float32)} for _ in range(200)])
    os._exit(3)   # the process dies before commit
""")


def test_a_crash_before_commit_leaves_no_complete_looking_file(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    script = tmp_path / "crash.py"
    script.write_text(_CRASH)
    target = tmp_path / "out" / "data.rec"
    target.parent.mkdir()
    result = subprocess.run([sys.executable, str(script), str(target), root], timeout=60)
    assert result.returncode == 3
    assert not target.exists()
    leftovers = list(target.parent.iterdir())
    assert leftovers, "the pages were written to a temporary file"
    for temp in leftovers:
        with pytest.raises(RecordFileError, match="truncated"):
            FileReader(str(temp))


def test_a_failure_during_commit_keeps_the_old_files(tmp_path, monkeypatch):
    files = write(tmp_path / "data.rec", n=10, shard_num=2)
    calls = []
    real_replace = os.replace

    def failing_replace(src, dst):
        calls.append(dst)
        if len(calls) == 1:
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write(tmp_path / "data.rec", n=30, shard_num=2, overwrite=True, start=500)
    monkeypatch.undo()
    assert sorted(int(r["label"]) for r in FileReader(files[0])) == list(range(10))
    assert sorted(os.listdir(tmp_path)) == ["data.rec0", "data.rec1"]   # temporaries removed


def test_shards_of_different_commits_are_detected(tmp_path, monkeypatch):
    files = write(tmp_path / "data.rec", n=10, shard_num=2)
    real_replace = os.replace
    calls = []

    def dies_after_first_rename(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("power cut")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", dies_after_first_rename)
    with pytest.raises(OSError):
        write(tmp_path / "data.rec", n=10, shard_num=2, overwrite=True, start=50)
    monkeypatch.undo()
    with pytest.raises(RecordFileError, match="another write"):
        FileReader(files[0])


@pytest.mark.parametrize("row,field,message", [
    ({"x": np.zeros(4), "label": 1.5, "tag": "a"}, "label", "expected int64"),
    ({"x": np.zeros(3), "label": 1, "tag": "a"}, "x", r"expected shape \[4\]"),
    ({"x": np.zeros(4), "label": 1, "tag": 7}, "tag", "expected a str"),
    ({"x": np.zeros(4), "label": 1}, "tag", "missing"),
    ({"x": np.zeros(4), "label": 1, "tag": "a", "extra": 1}, "extra", "not in the schema"),
])
def test_schema_mismatch_names_row_and_field(tmp_path, row, field, message):
    writer = FileWriter(str(tmp_path / "data.rec"))
    writer.add_schema(SCHEMA)
    good = {"x": np.zeros(4), "label": 0, "tag": "ok"}
    with pytest.raises(RecordFileError, match=rf"row 1.*'{field}'|'{field}'.*row 1") as info:
        writer.write_raw_data([good, row])
    assert re.search(message, str(info.value))


def test_bad_schemas_and_indexes_are_refused(tmp_path):
    writer = FileWriter(str(tmp_path / "data.rec"))
    with pytest.raises(RecordFileError, match="'a'.*unknown type"):
        writer.add_schema({"a": {"type": "complex64"}})
    with pytest.raises(RecordFileError, match="'b'.*shape"):
        writer.add_schema({"b": {"type": "float32", "shape": [2, -1]}})
    writer.add_schema(SCHEMA)
    with pytest.raises(RecordFileError, match="'x'.*cannot be indexed"):
        writer.add_index(["x"])
    with pytest.raises(RecordFileError, match="'nope'"):
        writer.add_index("nope")
