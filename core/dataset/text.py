"""Text for language modelling: character / byte tokenizers with vocabulary files, and
`SequenceWindows`, a random-access source of (input, target) token windows.

    tok = CharTokenizer.from_corpus(text)          # vocabulary = sorted distinct characters
    tok.save("vocab.json"); tok = CharTokenizer.load("vocab.json")
    ids = tok.encode(text)                         # int32 array
    data = ds.GeneratorDataset(SequenceWindows(ids, block_size=128), ["input", "target"])
"""
import json
import os

import numpy as np

from ..errors import ConfigError, DatasetNotFoundError

__all__ = ["CharTokenizer", "ByteLevelTokenizer", "SequenceWindows"]


def _read_vocab(path, kind):
    if not os.path.isfile(path):
        raise DatasetNotFoundError(f"{path}: no such vocabulary file")
    try:
        with open(path, encoding="utf-8") as handle:
            content = json.load(handle)
    except ValueError as exc:
        raise ConfigError(f"not a vocabulary file ({exc})", source=path) from exc
    if not isinstance(content, dict) or content.get("kind") != kind:
        raise ConfigError(f"expected a '{kind}' vocabulary file, got kind "
                          f"{content.get('kind') if isinstance(content, dict) else None!r}", source=path)
    return content


def _write_json(path, content):
    temp = f"{path}.tmp-{os.getpid()}"
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump(content, handle, ensure_ascii=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


class CharTokenizer:
    """One id per character of a fixed vocabulary (`tokens`, in id order).

    Characters outside the vocabulary map to `unknown_token` when it is set, else raise.
    Calling the tokenizer encodes, so it can be a `map` operation on a text column.
    """

    def __init__(self, tokens, unknown_token=None):
        self.tokens = list(tokens)
        if len(set(self.tokens)) != len(self.tokens) or not all(isinstance(t, str) and len(t) == 1
                                                                for t in self.tokens):
            raise ValueError("CharTokenizer: tokens must be distinct single characters")
        self.unknown_token = unknown_token
        if unknown_token is not None and unknown_token not in self.tokens:
            self.tokens.append(unknown_token)
        self._ids = {t: i for i, t in enumerate(self.tokens)}
        self._table = np.array(self.tokens)

    @classmethod
    def from_corpus(cls, text, unknown_token=None):
        """The vocabulary of `text`: its distinct characters, sorted (as nanoGPT's char model)."""
        return cls(sorted(set(text)), unknown_token)

    @classmethod
    def from_file(cls, corpus_path, unknown_token=None, encoding="utf-8"):
        if not os.path.isfile(corpus_path):
            raise DatasetNotFoundError(f"{corpus_path}: no such corpus file")
        with open(corpus_path, encoding=encoding) as handle:
            return cls.from_corpus(handle.read(), unknown_token)

    @property
    def vocab_size(self):
        return len(self.tokens)

    def encode(self, text):
        """str -> int32 ids."""
        text = str(text)
        unknown = self._ids.get(self.unknown_token)
        try:
            return np.fromiter((self._ids[c] for c in text), dtype=np.int32, count=len(text))
        except KeyError:
            if unknown is None:
                position = next(i for i, c in enumerate(text) if c not in self._ids)
                raise ValueError(f"CharTokenizer: character {text[position]!r} at position {position} "
                                 "is not in the vocabulary (set unknown_token to map it)") from None
            return np.fromiter((self._ids.get(c, unknown) for c in text), dtype=np.int32, count=len(text))

    def decode(self, ids):
        """ids -> str."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"CharTokenizer: ids must lie in [0, {self.vocab_size}), got {ids.min()}..{ids.max()}")
        return "".join(self._table[ids].tolist())

    __call__ = encode

    def save(self, path):
        """Write the vocabulary as JSON (atomically)."""
        _write_json(path, {"kind": "char", "tokens": self.tokens, "unknown_token": self.unknown_token})

    @classmethod
    def load(cls, path):
        content = _read_vocab(path, "char")
        return cls(content["tokens"], content.get("unknown_token"))


class ByteLevelTokenizer:
    """Ids 0..255 are the UTF-8 bytes; `special_tokens` take ids 256, 257, ... Any text encodes."""

    def __init__(self, special_tokens=()):
        self.special_tokens = list(special_tokens)
        self._special_ids = {t: 256 + i for i, t in enumerate(self.special_tokens)}

    @property
    def vocab_size(self):
        return 256 + len(self.special_tokens)

    def token_id(self, special_token):
        if special_token not in self._special_ids:
            raise ValueError(f"ByteLevelTokenizer: unknown special token {special_token!r}; "
                             f"known: {self.special_tokens}")
        return self._special_ids[special_token]

    def encode(self, text):
        """str -> int32 ids of its UTF-8 bytes (special tokens are not parsed from text)."""
        return np.frombuffer(str(text).encode("utf-8"), dtype=np.uint8).astype(np.int32)

    def decode(self, ids):
        """ids -> str; special tokens are written by name, invalid UTF-8 is replaced."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"ByteLevelTokenizer: ids must lie in [0, {self.vocab_size}), got {ids.min()}..{ids.max()}")
        pieces, run = [], []
        for i in ids.tolist():
            if i < 256:
                run.append(i)
                continue
            pieces.append(bytes(run).decode("utf-8", errors="replace"))
            pieces.append(self.special_tokens[i - 256])
            run = []
        pieces.append(bytes(run).decode("utf-8", errors="replace"))
        return "".join(pieces)

    __call__ = encode

    def save(self, path):
        _write_json(path, {"kind": "byte", "special_tokens": self.special_tokens})

    @classmethod
    def load(cls, path):
        return cls(_read_vocab(path, "byte").get("special_tokens", []))


class SequenceWindows:
    """Random-access source of language-modelling windows over a 1-D token array.

    Window k starts at k * stride: input = tokens[s : s + block_size], target = the same window
    shifted by one token. len = (len(tokens) - block_size - 1) // stride + 1. `__getitems__`
    gathers a whole batch with one fancy index (GeneratorDataset uses it under `batch`).
    """

    def __init__(self, tokens, block_size, stride=None):
        self.tokens = np.asarray(tokens)
        if self.tokens.ndim != 1:
            raise ValueError(f"SequenceWindows: tokens must be 1-D, got shape {list(self.tokens.shape)}")
        self.block_size = int(block_size)
        self.stride = self.block_size if stride is None else int(stride)
        if self.block_size < 1 or self.stride < 1:
            raise ValueError(f"SequenceWindows: block_size and stride must be >= 1, got "
                             f"{block_size!r}, {stride!r}")
        if len(self.tokens) < self.block_size + 1:
            raise ValueError(f"SequenceWindows: {len(self.tokens)} tokens are too few for one window "
                             f"of block_size {self.block_size} (+1 target)")
        self._offsets = np.arange(self.block_size + 1)

    def __len__(self):
        return (len(self.tokens) - self.block_size - 1) // self.stride + 1

    def __getitem__(self, index):
        if not -len(self) <= index < len(self):
            raise IndexError(f"SequenceWindows: window {index} out of range [0, {len(self)})")
        start = (index % len(self)) * self.stride
        window = self.tokens[start:start + self.block_size + 1]
        return window[:-1].copy(), window[1:].copy()

    def __getitems__(self, indices):
        starts = np.asarray(indices, dtype=np.int64) * self.stride
        windows = self.tokens[starts[:, None] + self._offsets]   # (B, block_size + 1)
        return windows[:, :-1], windows[:, 1:]
