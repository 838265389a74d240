"""Op-table rows for core/ops/indexing.py: gathers, scatters, segment reductions, top-k, sort, cumsum.
Index arrays are fixed with repeats so the scatter-adds must accumulate."""
import numpy as np

from mstrain.ops import functional as F
from mstrain.ops import indexing, sparse
from mstrain.ops.primitive import get

from .cases import case, const, normal

_IDS = np.array([[3, 0, 3], [1, 3, 4]])           # repeats: row 3 three times
_ROWS = np.array([2, 0, 2, 2, 1])
_SEGMENTS = np.array([0, 2, 0, 3, 2, 0])          # segment 1 and 4 empty (num_segments 5)


def _scatter_ref(shape, index, src, axis):
    out = np.zeros(shape)
    moved = np.moveaxis(out, axis, 0)
    np.add.at(moved, index.reshape(-1), np.moveaxis(src.reshape(shape[:axis] + (index.size,) + shape[axis + 1:]),
                                                    axis, 0))
    return out


def _segment_ref(x, ids, n, reduce):
    out = np.zeros((n,) + x.shape[1:])
    for s in range(n):
        members = x[ids == s]
        if len(members):
            out[s] = reduce(members, axis=0)
    return out


def _take_back_ref(g, indices, shape, axis):
    out = np.zeros(shape)
    grids = list(np.ogrid[tuple(slice(n) for n in g.shape)])
    grids[axis] = indices
    np.add.at(out, tuple(np.broadcast_arrays(*grids)), g)
    return out


def _distinct(*shape):
    """A random permutation of well-separated values (no ties, so top-k/sort are well defined)."""
    return lambda rng: rng.permutation(np.prod(shape)).reshape(shape) * 0.1 + rng.uniform(0, 0.01, shape)


def _topk_ref(x, k, largest):
    idx = np.argsort(-x if largest else x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, idx, -1), idx


def _cumsum_ref(x, axis, exclusive, reverse):
    if reverse:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis)
    if exclusive:
        out = out - x
    return np.flip(out, axis) if reverse else out


CASES = [
    case("gather", lambda x: F.gather(x, _IDS, 0), lambda x: x[_IDS], normal(5, 3), second_order=True),
    case("gather", lambda x: F.gather(x, _ROWS, 1), lambda x: x[:, _ROWS], normal(2, 3, 4), name="gather_axis1"),
    case("gather", lambda x: F.embedding_lookup(x, _IDS), lambda x: x[_IDS], normal(6, 4), name="embedding_lookup"),
    case("gather", lambda x: F.index_select(x, -1, _ROWS), lambda x: x[..., _ROWS], normal(3, 3),
         name="index_select"),
    case("gather", lambda x: F.repeat_interleave(x, np.array([2, 0, 1]), 0),
         lambda x: np.repeat(x, [2, 0, 1], 0), normal(3, 2), name="repeat_interleave"),
    case("gather_backward", lambda g: indexing.gather_backward(g, _IDS, (5, 2), 0),
         lambda g: _scatter_ref((5, 2), _IDS, g, 0), normal(2, 3, 2), second_order=True),
    case("gather_backward", lambda g: indexing.gather_backward(g, _ROWS, (2, 3, 4), 1),
         lambda g: _scatter_ref((2, 3, 4), _ROWS, g, 1), normal(2, 5, 4), name="gather_backward_axis1"),
    case("index_add", lambda x, u: F.scatter_add(x, _ROWS, u), lambda x, u: x + _scatter_ref(x.shape, _ROWS, u, 0),
         normal(3, 4), normal(5, 4), second_order=True),
    case("index_add", lambda x, u: F.scatter_add(x, _ROWS, u, axis=1),
         lambda x, u: x + _scatter_ref(x.shape, _ROWS, u, 1), normal(2, 3), normal(2, 5), name="scatter_add_axis1"),
    case("index_add", lambda x, u: F.tensor_scatter_add(x, np.array([[0, 1], [2, 2], [0, 1]]), u),
         lambda x, u: x + _scatter_ref((12, 2), np.array([1, 10, 1]), u, 0).reshape(3, 4, 2),
         normal(3, 4, 2), normal(3, 2), name="tensor_scatter_add"),
    case("gather", lambda x: F.gather_nd(x, np.array([[[0, 1], [2, 3]], [[-1, 0], [0, 1]]])),
         lambda x: x[np.array([[0, 2], [2, 0]]), np.array([[1, 3], [0, 1]])], normal(3, 4, 2), name="gather_nd"),
    case(("sparse_gather_rows", "sparse_gather_rows_backward"),
         lambda x: sparse.sparse_embedding_lookup(x, np.array([[3, 0, 7], [1, 3, -1]])),
         lambda x: np.where(np.array([[1, 1, 0], [1, 1, 0]])[..., None] == 1,
                            x[np.array([[3, 0, 0], [1, 3, 0]])], 0.0), normal(6, 4),
         name="sparse_embedding_lookup_out_of_range_ids_give_zero_rows"),
    case("sparse_gather_rows_backward",
         lambda g: get("sparse_gather_rows_backward")(g, np.array([3, 0, 7, 3]), (5, 2)),
         lambda g: _scatter_ref((5, 2), np.array([3, 0, 0, 3]), g * np.array([[1], [1], [0], [1]]), 0),
         normal(4, 2), second_order=True),
    case(("take_along_axis", "take_along_axis_backward"),
         lambda x: F.take_along_axis(x, np.array([[0, 0, 2], [1, 1, 1]]), 1),
         lambda x: np.take_along_axis(x, np.array([[0, 0, 2], [1, 1, 1]]), 1), normal(2, 3), second_order=True),
    case("take_along_axis_backward",
         lambda g: indexing.take_along_axis_backward(g, np.array([[0, 0], [2, 1], [2, 2]]), (3, 4), 1),
         lambda g: _take_back_ref(g, np.array([[0, 0], [2, 1], [2, 2]]), (3, 4), 1), normal(3, 2)),
    case("unsorted_segment_sum", lambda x: F.unsorted_segment_sum(x, _SEGMENTS, 5),
         lambda x: _segment_ref(x, _SEGMENTS, 5, np.sum), normal(6, 3), second_order=True),
    case("unsorted_segment_sum", lambda x: F.unsorted_segment_sum(x, _SEGMENTS.reshape(2, 3), 5),
         lambda x: _segment_ref(x.reshape(6, 2), _SEGMENTS, 5, np.sum), normal(2, 3, 2), name="segment_sum_2d_ids"),
    case("unsorted_segment_max", lambda x: F.unsorted_segment_max(x, _SEGMENTS, 5),
         lambda x: _segment_ref(x, _SEGMENTS, 5, np.max), normal(6, 3)),
    case("unsorted_segment_max", lambda x: F.unsorted_segment_max(x, _SEGMENTS, 5),
         lambda x: _segment_ref(x, _SEGMENTS, 5, np.max), normal(6), name="segment_max_1d"),
    case("unsorted_segment_min", lambda x: F.unsorted_segment_min(x, _SEGMENTS, 5),
         lambda x: _segment_ref(x, _SEGMENTS, 5, np.min), normal(6, 2)),
    case("unsorted_segment_sum", lambda x: F.unsorted_segment_mean(x, _SEGMENTS, 5),
         lambda x: _segment_ref(x, _SEGMENTS, 5, np.mean), normal(6, 3), name="segment_mean", second_order=True),
    case("topk", lambda x: F.topk(x, 3), lambda x: _topk_ref(x, 3, True), _distinct(4, 7)),
    case("topk", lambda x: F.topk(x, 2, largest=False), lambda x: _topk_ref(x, 2, False), _distinct(3, 5),
         name="topk_smallest"),
    case("sort", lambda x: F.sort(x, 0), lambda x: (np.sort(x, 0), np.argsort(x, 0)), _distinct(5, 3)),
    case("sort", lambda x: F.sort(x, -1, descending=True),
         lambda x: (-np.sort(-x, -1), np.argsort(-x, -1)), _distinct(3, 5), name="sort_descending"),
    case("cumsum", lambda x: F.cumsum(x, 1), lambda x: np.cumsum(x, 1), normal(3, 5), second_order=True),
    case("cumsum", lambda x, a, e, r: F.cumsum(x, a, e, r), _cumsum_ref, normal(4, 3), const(0), const(True),
         const(True), name="cumsum_exclusive_reverse"),
    case("cumsum", lambda x: F.cumsum(x, 0, exclusive=True), lambda x: _cumsum_ref(x, 0, True, False), normal(4, 2),
         name="cumsum_exclusive"),
]
