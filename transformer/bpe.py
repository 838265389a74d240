"""Byte-level BPE tokenizer: trainable on a text, saved as JSON, lossless on any UTF-8 string.

    tok = ByteBPETokenizer.train(text, vocab_size=512)   # 256 byte ids + 256 merges
    ids = tok.encode("ROMEO: à bientôt"); tok.decode(ids) == "ROMEO: à bientôt"
    tok.save("bpe.json"); ByteBPETokenizer.load("bpe.json")

Text is first cut into chunks (GPT-2's rule, simplified: an optional space followed by letters, by
digits, or by other symbols; runs of whitespace), so merges never cross a word boundary. Training
repeatedly merges the most frequent adjacent pair of ids over the chunks (ties: the smallest pair),
giving id 256 + k to merge k. Encoding applies the merges in the order they were learnt.
"""
import json
import re
from collections import Counter

from mstrain.fileio import write_bytes_atomically

from .tokenizer import read_tokenizer_file

__all__ = ["ByteBPETokenizer"]

_CHUNK = re.compile(r" ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+|_+")


def _chunks(text):
    return _CHUNK.findall(text)


def _merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return tuple(out)


class ByteBPETokenizer:
    """`merges`: the learnt pairs in order; merge k makes id 256 + k."""

    def __init__(self, merges=()):
        self.merges = [tuple(int(i) for i in pair) for pair in merges]
        self._rank = {pair: k for k, pair in enumerate(self.merges)}
        self._bytes = [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            if a >= len(self._bytes) or b >= len(self._bytes):
                raise ValueError(f"ByteBPETokenizer: merge ({a}, {b}) uses an id not defined before it")
            self._bytes.append(self._bytes[a] + self._bytes[b])
        self._cache = {}

    @classmethod
    def train(cls, text, vocab_size):
        """Learn vocab_size - 256 merges from `text` (fewer when no pair repeats)."""
        if vocab_size < 256:
            raise ValueError(f"ByteBPETokenizer: vocab_size must be at least 256 (the bytes), got {vocab_size}")
        words = Counter(tuple(chunk.encode("utf-8")) for chunk in _chunks(text))
        merges = []
        for new_id in range(256, vocab_size):
            pairs = Counter()
            for word, count in words.items():
                for pair in zip(word, word[1:]):
                    pairs[pair] += count
            if not pairs:
                break
            best = max(pairs.items(), key=lambda item: (item[1], -item[0][0], -item[0][1]))
            if best[1] < 2:
                break
            merges.append(best[0])
            words = Counter({_merge(word, best[0], new_id): count for word, count in words.items()})
        return cls(merges)

    @property
    def vocab_size(self):
        return 256 + len(self.merges)

    def _encode_chunk(self, chunk):
        ids = self._cache.get(chunk)
        if ids is None:
            ids = tuple(chunk.encode("utf-8"))
            while len(ids) > 1:
                ranked = [(self._rank.get(pair, len(self.merges)), pair) for pair in zip(ids, ids[1:])]
                rank, pair = min(ranked)
                if rank == len(self.merges):
                    break
                ids = _merge(ids, pair, 256 + rank)
            self._cache[chunk] = ids
        return ids

    def encode(self, text):
        return [i for chunk in _chunks(text) for i in self._encode_chunk(chunk)]

    def decode(self, ids):
        try:
            data = b"".join(self._bytes[int(i)] for i in ids)
        except IndexError:
            bad = next(int(i) for i in ids if not 0 <= int(i) < self.vocab_size)
            raise ValueError(f"ByteBPETokenizer: id {bad} is outside the vocabulary (0..{self.vocab_size - 1})") from None
        return data.decode("utf-8", errors="replace")

    def save(self, path):
        payload = {"type": "byte_bpe", "merges": [list(pair) for pair in self.merges]}
        write_bytes_atomically(path, json.dumps(payload).encode("utf-8"))

    @classmethod
    def load(cls, path):
        return cls(read_tokenizer_file(path, "byte_bpe", "merges", "a byte-level BPE"))
