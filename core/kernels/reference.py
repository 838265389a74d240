"""Numpy reference implementations of the kernels.

Each function here is the definition of what its C++ twin computes: `mstrain.kernels` falls back to
it when the extension is not built (or `MSTRAIN_DISABLE_KERNELS=1`), and the tests compare the
two. Inputs are assumed validated by `mstrain.kernels` (dtypes, shapes, index ranges).
"""
import numpy as np

__all__ = ["scatter_add_rows", "segment_sum", "segment_max", "segment_softmax"]


def scatter_add_rows(out, index, src):
    """out[index[i]] += src[i] for every i (rows; repeated indices accumulate). In place, returns out."""
    np.add.at(out, index, src)
    return out


def segment_sum(data, segment_ids, num_segments):
    """out[s] = sum_{i: segment_ids[i] == s} data[i]; empty segments are 0."""
    out = np.zeros((num_segments,) + data.shape[1:], dtype=data.dtype)
    if data.shape[0]:
        np.add.at(out, segment_ids, data)
    return out


def _lowest(dtype):
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def segment_max(data, segment_ids, num_segments, empty_value=0.0):
    """out[s] = max_{i: segment_ids[i] == s} data[i] (elementwise over trailing axes);
    segments with no member are `empty_value`. NaN propagates."""
    out = np.full((num_segments,) + data.shape[1:], _lowest(data.dtype), dtype=data.dtype)
    if data.shape[0]:
        np.maximum.at(out, segment_ids, data)
    counts = np.bincount(segment_ids, minlength=num_segments)
    out[counts == 0] = empty_value
    return out


def segment_softmax(scores, segment_ids, num_segments):
    """out[i] = exp(scores[i] - m[s]) / sum_{j: seg(j) == s} exp(scores[j] - m[s]) with s = segment_ids[i]
    and m[s] the segment maximum (numerical stability); per column when scores is (E, H)."""
    seg_max = segment_max(scores, segment_ids, num_segments)
    shifted = np.exp(scores - seg_max[segment_ids])
    seg_sum = segment_sum(shifted, segment_ids, num_segments)
    return shifted / seg_sum[segment_ids]
