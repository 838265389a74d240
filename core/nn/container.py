"""Containers: SequentialCell (runs its cells in order), CellList and CellDict (hold cells)."""
from collections import OrderedDict

from .cell import Cell

__all__ = ["SequentialCell", "CellList", "CellDict"]


def _check_cell(cell, where):
    if not isinstance(cell, Cell):
        raise TypeError(f"{where}: expected a Cell, got {type(cell).__name__}")
    return cell


class _IndexedCells(Cell):
    """Cells keyed "0", "1", ...; re-keys (and renames Parameters) after insertions and deletions."""

    def __init__(self, cells, auto_prefix=True):
        super().__init__(auto_prefix=auto_prefix)
        object.__setattr__(self, "_list", [])
        self._reset(list(cells))

    def _reset(self, cells):
        for name in list(self._cells):
            self._forget(name)
            object.__delattr__(self, name)
        self._list.clear()
        for cell in cells:
            self._append(cell)

    def _append(self, cell):
        self.insert_child_to_cell(str(len(self._list)), _check_cell(cell, type(self).__name__))
        self._list.append(cell)

    def _index(self, index):
        n = len(self._list)
        if not -n <= index < n:
            raise IndexError(f"{type(self).__name__}: index {index} out of range for {n} cells")
        return index % n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return type(self)(self._list[index])
        return self._list[self._index(index)]

    def __setitem__(self, index, cell):
        cells = list(self._list)
        cells[self._index(index)] = cell
        self._reset(cells)

    def __delitem__(self, index):
        cells = list(self._list)
        del cells[index if isinstance(index, slice) else self._index(index)]
        self._reset(cells)

    def __len__(self):
        return len(self._list)

    def __iter__(self):
        return iter(self._list)

    def append(self, cell):
        """Add a cell at the end."""
        self._append(cell)
        return self

    def extend(self, cells):
        """Add cells at the end."""
        for cell in cells:
            self._append(cell)
        return self

    def insert(self, index, cell):
        """Insert a cell before position `index`."""
        cells = list(self._list)
        cells.insert(index, cell)
        self._reset(cells)


class SequentialCell(_IndexedCells):
    """Apply cells in order: `SequentialCell([a, b])(x) == b(a(x))`.

    Takes a list of cells, cells as positional arguments, or an OrderedDict name -> cell (the
    names then become the attribute names and parameter prefixes).
    """

    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], (OrderedDict, dict)):
            Cell.__init__(self)
            object.__setattr__(self, "_list", [])
            for name, cell in args[0].items():
                self.insert_child_to_cell(name, _check_cell(cell, "SequentialCell"))
                self._list.append(cell)
            return
        cells = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
        super().__init__(cells)

    def construct(self, x):
        for cell in self._list:
            x = cell(x)
        return x


class CellList(_IndexedCells):
    """A list of cells whose parameters are registered (named "0.weight", "1.weight", ...)."""

    def __init__(self, args=None, auto_prefix=True):
        super().__init__(args or (), auto_prefix=auto_prefix)


class CellDict(Cell):
    """An ordered dict of cells whose parameters are registered under their keys."""

    def __init__(self, args=None, auto_prefix=True):
        super().__init__(auto_prefix=auto_prefix)
        if args is not None:
            self.update(args)

    def __getitem__(self, key):
        return self._cells[key]

    def __setitem__(self, key, cell):
        if not isinstance(key, str) or not key or "." in key:
            raise KeyError(f"CellDict: keys must be non-empty strings without '.', got {key!r}")
        self.insert_child_to_cell(key, _check_cell(cell, "CellDict"))

    def __delitem__(self, key):
        self._forget(key)
        object.__delattr__(self, key)

    def __contains__(self, key):
        return key in self._cells

    def __len__(self):
        return len(self._cells)

    def __iter__(self):
        return iter(self._cells)

    def keys(self):
        return self._cells.keys()

    def values(self):
        return self._cells.values()

    def items(self):
        return self._cells.items()

    def pop(self, key):
        """Remove and return the cell under `key`."""
        cell = self._cells[key]
        del self[key]
        return cell

    def clear(self):
        for key in list(self._cells):
            del self[key]

    def update(self, cells):
        """Add cells from a mapping or an iterable of (key, cell) pairs."""
        pairs = cells.items() if hasattr(cells, "items") else cells
        for key, cell in pairs:
            self[key] = cell
