"""The least recently used slots of a cache in time proportional to the slots touched, not to the
cache: a queue of (slot, step) entries in the order they were used.

Each step appends the slots it used with the step's clock; an entry is current while the slot's
last use is still that step (`last_use[slot] == clock`), else stale. The oldest current entries
are the least recently used slots. `pop_oldest` scans from the head, dropping stale entries and
those of slots the step is about to use again (they are appended anew), so a step costs its own
slots plus the stale entries it passes (`pop_oldest`). The buffer holds 1.5 entries per slot: when it is full
the current entries (at most one per slot) move to its front, once every capacity / 2 appended
entries, which keeps that copy's cost per entry constant.
"""
import numpy as np

__all__ = ["RecencyQueue", "queue_bytes"]


def queue_bytes(capacity):
    """Bytes of a RecencyQueue for `capacity` slots (int32 slot and clock per entry)."""
    return _entries(capacity) * 8


def _entries(capacity):
    return capacity + max(capacity // 2, 1024)


class RecencyQueue:
    """Slots of a `capacity`-slot cache in the order of their last use (module doc)."""

    def __init__(self, capacity):
        self.slots = np.zeros(_entries(capacity), np.int32)
        self.clocks = np.zeros(_entries(capacity), np.int32)
        self.head = self.tail = 0

    @property
    def nbytes(self):
        return self.slots.nbytes + self.clocks.nbytes

    def clear(self):
        self.head = self.tail = 0

    def touch(self, slots, clock, last_use):
        """Record that `slots` (distinct) were used at `clock` (last_use[slots] already says so)."""
        if self.tail + slots.size > self.slots.size:
            self._compact(last_use)
        end = self.tail + slots.size
        self.slots[self.tail:end] = slots
        self.clocks[self.tail:end] = clock
        self.tail = end

    def _compact(self, last_use):
        slots, clocks = self.slots[self.head:self.tail], self.clocks[self.head:self.tail]
        current = last_use[slots] == clocks
        count = int(current.sum())
        self.slots[:count], self.clocks[:count] = slots[current], clocks[current]
        self.head, self.tail = 0, count

    def pop_oldest(self, count, last_use):
        """The `count` least recently used slots, oldest first (ties: the order they were used
        in); their entries leave the queue. Slots the step uses again must not be chosen: set
        their last_use to -1 first (their entries turn stale; touch then adds them anew)."""
        chosen, found = [], 0
        while found < count and self.head < self.tail:
            stop = min(self.tail, self.head + max(2 * (count - found), 4096))
            slots, clocks = self.slots[self.head:stop], self.clocks[self.head:stop]
            usable = np.flatnonzero(last_use[slots] == clocks)
            if usable.size >= count - found:
                last = usable[count - found - 1]
                chosen.append(slots[usable[:count - found]])
                self.head += int(last) + 1
                found = count
            else:
                chosen.append(slots[usable])
                found += usable.size
                self.head = stop
        if found < count:
            raise RuntimeError(f"the recency queue holds {found} evictable slots, {count} were needed")
        return np.concatenate(chosen).astype(np.int64)
