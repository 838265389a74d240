"""Byte-level BPE: lossless round trips (unseen characters too), merges learnt by frequency, JSON."""
from collections import Counter

import pytest

from mstrain.transformer.bpe import ByteBPETokenizer, _chunks
from mstrain.transformer.tokenizer import CharTokenizer

TEXT = open("data/text/tinyshakespeare.txt", encoding="utf-8").read()[:20000]


@pytest.fixture(scope="module")
def tok():
    return ByteBPETokenizer.train(TEXT, 300)


def test_round_trip_and_compression(tok):
    sample = TEXT[5000:7000]
    ids = tok.encode(sample)
    assert tok.decode(ids) == sample
    assert len(ids) < 0.75 * len(sample.encode("utf-8"))
    assert tok.vocab_size == 300 and max(ids) < 300


def test_unseen_characters_round_trip(tok):
    text = "Zoë wrote: à bientôt 🙂 — 42 ∑\tend\n"
    assert tok.decode(tok.encode(text)) == text


def test_first_merge_is_the_most_frequent_pair(tok):
    pairs = Counter()
    for chunk in _chunks(TEXT):
        data = chunk.encode("utf-8")
        pairs.update(zip(data, data[1:]))
    count = max(pairs.values())
    assert tok.merges[0] == min(pair for pair, c in pairs.items() if c == count)
    assert tok.decode([256]) == bytes(tok.merges[0]).decode()


def test_save_load_and_errors(tok, tmp_path):
    tok.save(tmp_path / "bpe.json")
    again = ByteBPETokenizer.load(tmp_path / "bpe.json")
    assert again.merges == tok.merges and again.encode(TEXT[:500]) == tok.encode(TEXT[:500])
    with pytest.raises(ValueError, match="id 300"):
        tok.decode([1, 300])
    with pytest.raises(ValueError, match="at least 256"):
        ByteBPETokenizer.train("abc", 100)
    assert ByteBPETokenizer.train(TEXT[:2000], 260).vocab_size == 260


@pytest.mark.parametrize("content, message", [("{not json", "invalid JSON"),
                                              ('{"type": "char", "vocab": ["a"]}', "not a byte-level BPE file"),
                                              ("[1, 2]", "not a byte-level BPE file")])
def test_a_foreign_or_broken_file_is_a_user_error_naming_it(tmp_path, content, message):
    from mstrain.errors import DatasetFormatError, DatasetNotFoundError
    path = tmp_path / "bpe.json"
    path.write_text(content)
    with pytest.raises(DatasetFormatError, match=message) as caught:
        ByteBPETokenizer.load(path)
    assert str(path) in str(caught.value)
    with pytest.raises(DatasetNotFoundError, match="not found"):
        CharTokenizer.load(tmp_path / "missing.json")


def test_a_bpe_file_is_not_a_character_tokenizer(tok, tmp_path):
    from mstrain.errors import DatasetFormatError
    tok.save(tmp_path / "bpe.json")
    with pytest.raises(DatasetFormatError, match="not a character tokenizer file"):
        CharTokenizer.load(tmp_path / "bpe.json")
