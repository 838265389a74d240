"""Character tokenizer: one id per distinct character of a text, saved and loaded as JSON.

    tok = CharTokenizer.train(text)          # vocabulary: the sorted distinct characters
    ids = tok.encode("ROMEO:"); tok.decode(ids) == "ROMEO:"
    tok.save("vocab.json"); CharTokenizer.load("vocab.json")
"""
import json

import numpy as np

from mstrain.errors import DatasetFormatError, DatasetNotFoundError
from mstrain.fileio import write_bytes_atomically

__all__ = ["CharTokenizer"]


class CharTokenizer:
    """Maps characters to ids 0..V-1 in the order of `vocab` (a string or list of characters)."""

    def __init__(self, vocab):
        chars = list(vocab)
        if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
            raise ValueError("CharTokenizer: vocab must list distinct single characters")
        self.vocab = chars
        self._index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def train(cls, text):
        """The vocabulary of `text`: its distinct characters, sorted by code point."""
        return cls(sorted(set(text)))

    @property
    def vocab_size(self):
        return len(self.vocab)

    def encode(self, text):
        """int32 ids; a character outside the vocabulary raises ValueError naming it."""
        try:
            return np.fromiter((self._index[c] for c in text), dtype=np.int32, count=len(text))
        except KeyError as exc:
            raise ValueError(f"CharTokenizer: character {exc.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids):
        ids = np.asarray(ids).reshape(-1)
        bad = ids[(ids < 0) | (ids >= self.vocab_size)]
        if bad.size:
            raise ValueError(f"CharTokenizer: id {int(bad[0])} is outside the vocabulary (0..{self.vocab_size - 1})")
        return "".join(self.vocab[i] for i in ids)

    def save(self, path):
        payload = json.dumps({"type": "char", "vocab": self.vocab}, ensure_ascii=False, indent=0)
        write_bytes_atomically(path, payload.encode("utf-8"))

    @classmethod
    def load(cls, path):
        return cls(read_tokenizer_file(path, "char", "vocab", "a character tokenizer"))


def read_tokenizer_file(path, kind, list_key, what):
    """The `list_key` list of a tokenizer JSON file of type `kind`; a missing, unreadable or foreign
    file is a user error naming the path."""
    try:
        with open(path, encoding="utf-8") as f:
            payload = json.load(f)
    except FileNotFoundError:
        raise DatasetNotFoundError(f"{path}: tokenizer file not found") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetFormatError(f"{path}: not a tokenizer file (invalid JSON: {exc})") from None
    if not isinstance(payload, dict) or payload.get("type") != kind or not isinstance(payload.get(list_key), list):
        raise DatasetFormatError(f"{path}: not {what} file (expected type '{kind}' and a {list_key} list)")
    return payload[list_key]
