"""`mstrain data convert|info` through mstrain.mindrecord.cli.main."""
import json

import numpy as np

from mstrain.mindrecord import FileReader
from mstrain.mindrecord.cli import main


def test_convert_a_directory_of_npy_columns_and_describe_it(tmp_path, capsys):
    src = tmp_path / "arrays"
    src.mkdir()
    images = np.arange(30 * 4, dtype=np.uint8).reshape(30, 2, 2)
    labels = np.arange(30, dtype=np.int64) % 4
    np.save(src / "image.npy", images)
    np.save(src / "label.npy", labels)
    dst = tmp_path / "out.rec"
    assert main(["convert", str(src), str(dst), "--index", "label", "--shard-num", "2",
                 "--page-size", "64"]) == 0
    reader = FileReader(str(dst) + "0")
    assert np.array_equal(reader.read_rows(np.arange(30))["image"], images)
    assert reader.find("label", 3).tolist() == [i for i in range(30) if i % 4 == 3]
    capsys.readouterr()
    assert main(["data", "info", str(dst) + "1", "--json", "--verify"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["rows"] == 30 and info["index_fields"] == ["label"] and info["verified"]
    assert info["schema"] == {"image": {"type": "uint8", "shape": [2, 2]}, "label": {"type": "int64"}}
    assert sum(p["rows"] for p in info["page_table"]) == 30 and info["pages"] > 2
    assert main(["info", str(dst) + "0"]) == 0
    assert "index fields: label" in capsys.readouterr().out


def test_convert_npz_text_and_criteo(tmp_path):
    np.savez(tmp_path / "part1.npz", x=np.ones((3, 2), np.float32), name=np.array(["a", "b", "c"]))
    np.savez(tmp_path / "part2.npz", x=np.zeros((2, 2), np.float32), name=np.array(["d", "e"]))
    assert main(["convert", str(tmp_path), str(tmp_path / "z.rec"), "--kind", "npz"]) == 0
    assert [r["name"] for r in FileReader(str(tmp_path / "z.rec"))] == ["a", "b", "c", "d", "e"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be\n\nor not\n")
    assert main(["convert", str(corpus), str(tmp_path / "t.rec")]) == 0
    assert [r["text"] for r in FileReader(str(tmp_path / "t.rec"))] == ["to be", "or not"]
    tsv = tmp_path / "criteo.tsv"
    dense = ["1", "", "-3"] + ["0"] * 10
    cats = ["68fd1e64", ""] + ["0000000a"] * 24
    tsv.write_text("\t".join(["1"] + dense + cats) + "\n" + "\t".join(["0"] + ["2"] * 13 + cats) + "\n")
    assert main(["convert", str(tsv), str(tmp_path / "c.rec"), "--kind", "criteo"]) == 0
    first = FileReader(str(tmp_path / "c.rec"))[0]
    assert int(first["label"]) == 1 and first["dense"][0] == 1 and np.isnan(first["dense"][1])
    assert first["categorical"][:3].tolist() == [0x68fd1e64, -1, 10]


def test_user_errors_exit_2_with_one_line(tmp_path, capsys):
    assert main(["info", str(tmp_path / "missing.rec")]) == 2
    assert main(["convert", str(tmp_path / "nothing"), str(tmp_path / "x.rec"), "--kind", "npy"]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["convert", str(tmp_path / "absent"), str(tmp_path / "y.rec")]) == 2  # kind not given
    bad = tmp_path / "bad.rec"
    bad.write_bytes(b"not a record file at all" * 10)
    assert main(["info", str(bad)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 5 and all(line.startswith("mstrain data: error:") for line in lines)
    assert lines[3].endswith("absent: no such file or directory")
    assert "missing.rec" in lines[0] and "nothing" in lines[1] and "bad.rec" in lines[4]
