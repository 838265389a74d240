"""Character tokenizer round trips and the 90/10 split with the peer's batch rule."""
import json

import numpy as np
import pytest

from mstrain.transformer import CharTokenizer
from mstrain.transformer.data import load_text_splits, training_windows, validation_windows

TEXT_PATH = "data/text/tinyshakespeare.txt"


def test_round_trip_and_json(tmp_path):
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n"
    tok = CharTokenizer.train(text)
    assert tok.vocab == sorted(set(text))
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and len(ids) == len(text)
    assert tok.decode(ids) == text
    tok.save(tmp_path / "tok.json")
    assert json.loads((tmp_path / "tok.json").read_text())["type"] == "char"
    again = CharTokenizer.load(tmp_path / "tok.json")
    np.testing.assert_array_equal(again.encode(text), ids)


def test_bad_input_names_the_culprit():
    tok = CharTokenizer.train("abc")
    with pytest.raises(ValueError, match="'z'"):
        tok.encode("abz")
    with pytest.raises(ValueError, match="id 7"):
        tok.decode([0, 7])


def test_split_is_first_90_percent_and_vocab_65():
    train, val, tok = load_text_splits(TEXT_PATH)
    text = open(TEXT_PATH, encoding="utf-8").read()
    assert tok.vocab_size == 65
    assert len(train) == int(0.9 * len(text)) and len(train) + len(val) == len(text)
    assert tok.decode(val[:50]) == text[len(train):len(train) + 50]


def test_windows_replay_the_peer_sampler():
    ids = np.arange(1000, dtype=np.int32)
    x, y = training_windows(ids, steps=3, batch=4, seq_length=8, seed=5)
    rng = np.random.default_rng(5)
    for step in range(3):
        starts = rng.integers(0, 1000 - 8, size=4)
        np.testing.assert_array_equal(x[step, :, 0], starts)
    np.testing.assert_array_equal(y, x + 1)
    vx, vy = validation_windows(ids[:50], 8)
    assert vx.shape == (6, 8) and vx[1, 0] == 8 and vy[-1, -1] == 48
