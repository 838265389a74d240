"""mstrain recommender kit: Wide&Deep, Criteo preprocessing and the multi-level distributed
embedding cache (in the spirit of MindSpore Recommender). Imports only `core`'s public names."""
from .criteo import CriteoFormatError, load_vocab, preprocess_criteo, read_criteo_lines

__all__ = ["CriteoFormatError", "load_vocab", "preprocess_criteo", "read_criteo_lines"]
