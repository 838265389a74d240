"""Criteo preprocessing against a hand-made TSV: vocabulary, OOV ids, dense transform, bins,
split, malformed lines, the `mstrain data criteo` command."""
import json
import logging

import numpy as np
import pytest

from mstrain import cli
from mstrain.mindrecord import FileReader
from mstrain.recommender import CriteoFormatError, load_vocab, preprocess_criteo, read_criteo_lines


def _line(label, ints, cats):
    ints = list(ints) + [""] * (13 - len(ints))
    cats = list(cats) + ["aa"] * (26 - len(cats))
    return "\t".join([str(label)] + [str(v) for v in ints] + cats) + "\n"


# 10 lines: C1 takes "a1" 3 times and "b2" 2 times in the 8 training lines, "c3" once; the test
# lines hold "a1" and a value never seen ("ff").
_ROWS = [
    (1, [3, -1, ""], ["a1"]), (0, [0, 5], ["b2"]), (0, [10], ["a1"]), (1, [""], ["c3"]),
    (0, [1], ["b2"]), (0, [2], ["a1"]), (1, [7], [""]), (0, [4], [""]),
    (1, [100], ["a1"]), (0, [8], ["ff"]),
]


@pytest.fixture
def tsv(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("".join(_line(*row) for row in _ROWS))
    return path


def test_vocabulary_oov_ids_and_split(tsv, tmp_path):
    out = tmp_path / "out"
    summary = preprocess_criteo(str(tsv), str(out), threshold=2)
    assert (summary["train_rows"], summary["test_rows"]) == (8, 2)
    # C1 in training: a1 x3, b2 x2, "" x2, c3 x1 -> ids a1=1, ""=2 / b2=2 (count 2, ordered by value), c3 -> OOV 0
    assert summary["vocab"][0] == ["a1", "", "b2"]
    assert summary["categorical_sizes"][0] == 4
    assert summary["categorical_sizes"][1] == 2  # C2 is "aa" everywhere: OOV + one id
    assert summary["categorical_offsets"][:3] == [0, 4, 6]
    train = FileReader(str(out / "train.mindrecord"))
    rows = list(train)
    c1 = [int(r["ids"][0]) for r in rows]
    assert c1 == [1, 3, 1, 0, 3, 1, 2, 2]
    assert all(int(r["ids"][1]) == 4 + 1 for r in rows)  # field 2's offset + its one id
    np.testing.assert_array_equal([r["label"] for r in rows], [1, 0, 0, 1, 0, 0, 1, 0])
    test_rows = list(FileReader(str(out / "test.mindrecord")))
    assert [int(r["ids"][0]) for r in test_rows] == [1, 0]  # "ff" never seen in training -> OOV
    first = rows[0]["dense"]
    np.testing.assert_allclose(first[:3], [np.log1p(3), 0.0, 0.0], rtol=1e-6)  # -1 -> log1p(0), empty -> 0
    assert load_vocab(str(out)) == json.loads((out / "vocab.json").read_text())


def test_dense_bins_are_training_quantiles(tsv, tmp_path):
    summary = preprocess_criteo(str(tsv), str(tmp_path / "out"), threshold=1, dense_bins=4)
    edges = np.asarray(summary["dense_bin_edges"][0])
    train_i1 = np.array([3, 0, 10, 1, 2, 7, 4], float)  # line 4's I1 is empty
    expected = np.unique(np.quantile(np.log1p(train_i1), [0.25, 0.5, 0.75]))
    np.testing.assert_allclose(edges, expected)
    rows = list(FileReader(str(tmp_path / "out" / "train.mindrecord")))
    offset = summary["dense_bin_offsets"][0]
    locals_ = [int(r["dense_ids"][0]) - offset for r in rows]
    assert locals_[3] == 0  # empty -> bin 0
    assert locals_[0] == 1 + np.searchsorted(expected, np.log1p(3.0), side="right")
    assert locals_[2] == 1 + len(expected)  # 10 is the largest value: the last bin
    assert summary["dense_bin_offsets"][0] == sum(summary["categorical_sizes"])
    assert summary["num_rows"] == summary["dense_bin_offsets"][-1] + summary["dense_bin_sizes"][-1]


def test_malformed_lines_are_counted_and_named(tsv, tmp_path, caplog):
    good = tsv.read_text().splitlines(keepends=True)
    bad = good[:2] + ["1\t2\t3\n"] + good[2:5] + [_line(0, ["x1"], [])] + good[5:] + [_line(3, [], [])]
    path = tmp_path / "bad.txt"
    path.write_text("".join(bad))
    with caplog.at_level(logging.WARNING, logger="mstrain"):
        lines = read_criteo_lines(str(path))
    assert lines.skipped == [3, 7, 13] and len(lines) == 10
    messages = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert len(messages) == 1 and "3, 7, 13" in messages[0]
    np.testing.assert_array_equal(lines.labels, [r[0] for r in _ROWS])  # no field shifted
    with pytest.raises(CriteoFormatError, match=r"bad.txt:3: expected 40 tab-separated fields, got 3"):
        read_criteo_lines(str(path), strict=True)


def test_empty_fields_never_shift(tmp_path):
    path = tmp_path / "gaps.txt"
    path.write_text(_line(1, [""] * 12 + ["9"], [""] * 25 + ["beef"]) * 5)
    lines = read_criteo_lines(str(path))
    assert np.isnan(lines.integers[0, :12]).all() and lines.integers[0, 12] == 9
    assert lines.categoricals[0, 25] == "beef" and lines.categoricals[0, 0] == ""


def test_cli_converts_and_reports_user_errors(tsv, tmp_path, capsys):
    out = tmp_path / "cli_out"
    assert cli.main(["data", "criteo", str(tsv), str(out), "--threshold", "2"]) == 0
    assert "wrote 8 train and 2 test rows" in capsys.readouterr().out
    assert len(FileReader(str(out / "test.mindrecord"))) == 2
    bad = tmp_path / "bad.txt"
    bad.write_text(tsv.read_text() + "0\tzz\n")
    assert cli.main(["data", "criteo", str(bad), str(out), "--strict"]) == 2
    assert "bad.txt:11:" in capsys.readouterr().err
    assert cli.main(["data", "criteo", str(tmp_path / "missing.txt"), str(out)]) == 2


def test_job_finds_the_shipped_sample_from_another_directory(tmp_path, monkeypatch, repo_root):
    from mstrain.errors import DatasetNotFoundError
    from mstrain.recommender.jobs import CriteoData, ensure_records
    monkeypatch.chdir(tmp_path)
    data = CriteoData()
    data.records_dir = str(tmp_path / "records")
    vocab = ensure_records(data)
    assert vocab["source"] == str(repo_root / "data" / "criteo" / "criteo_train_sample.txt")
    assert (tmp_path / "records" / "train.mindrecord").is_file()
    data.source = "data/criteo/missing.txt"
    with pytest.raises(DatasetNotFoundError, match="data.source: Criteo file not found"):
        ensure_records(data)
