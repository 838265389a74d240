"""Dropout masks in compiled graphs: drawn in C from the very generator eager mode draws from.

Eager `bernoulli_mask` (mstrain.ops.nn_ops) draws `integers(0, 65536, shape, dtype=uint16)` from
the global PCG64 generator (or the op's own seeded stream) and keeps the draws below a threshold,
scaled. numpy fills that request 16 bits at a time from 32-bit draws (the low half first, then the
high half of the same draw; a fresh pair per request). The C kernel here does the same with
numpy's own `next_uint32` on the generator's own state (`bit_generator.ctypes`), writing the mask
straight into its planned buffer: the same numbers as eager, no temporary arrays, and the Python
generator has advanced exactly as an eager draw would have advanced it (eager and compiled steps
may alternate). The state address is looked up before every run, since `set_seed` replaces the
generator.
"""
import ctypes

import numpy as np

from . import build as _build

_SOURCE = r"""#include <cstdint>
#include <cstring>
typedef uint32_t (*next_uint32_t)(void*);

template <typename T> static void fill(T* out, int64_t count, uint32_t threshold, T scale, void* state,
                                       next_uint32_t next) {
  const T zero = 0;
  if (threshold >= 65536u) {
    for (int64_t i = 0; i < count; ++i) out[i] = scale;
    return;
  }
  int64_t i = 0;
  for (; i + 1 < count; i += 2) {  /* one 32-bit draw: its low then its high 16 bits */
    const uint32_t bits = next(state);
    out[i] = (bits & 0xffffu) < threshold ? scale : zero;
    out[i + 1] = (bits >> 16) < threshold ? scale : zero;
  }
  if (i < count) out[i] = (next(state) & 0xffffu) < threshold ? scale : zero;
}

/* p = {out, bit generator state, next_uint32}; n = {count, threshold, itemsize, scale's bits} */
extern "C" void ms_bernoulli_mask(void** p, const int64_t* n) {
  const next_uint32_t next = reinterpret_cast<next_uint32_t>(p[2]);
  const uint32_t threshold = static_cast<uint32_t>(n[1]);
  if (n[2] == 2) {
    const uint16_t scale = static_cast<uint16_t>(n[3]);
    fill(static_cast<uint16_t*>(p[0]), n[0], threshold, scale, p[1], next);
  } else if (n[2] == 4) {
    const uint32_t scale = static_cast<uint32_t>(n[3]);
    fill(static_cast<uint32_t*>(p[0]), n[0], threshold, scale, p[1], next);
  } else {
    const uint64_t scale = static_cast<uint64_t>(n[3]);
    fill(static_cast<uint64_t*>(p[0]), n[0], threshold, scale, p[1], next);
  }
}
"""

_UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _function():
    return _build.load_optional(_SOURCE, "ms_bernoulli_mask")


def threshold_and_scale(keep_prob, dtype):
    """(threshold, scale) of eager's mask: draws below threshold (of 65536) keep, scaled."""
    threshold = min(max(int(round(keep_prob * 65536)), 1), 65536)
    return threshold, np.multiply(True, 65536 / threshold, dtype=dtype)


class MaskKernel:
    """Writes one bernoulli_mask draw into `out` (a C-contiguous float array), in C."""

    def __init__(self, function, out, keep_prob, seed):
        from ..ops.nn_ops import _mask_generator
        self._generator_of = lambda: _mask_generator(seed)
        threshold, scale = threshold_and_scale(keep_prob, out.dtype)
        scale_bits = int(np.asarray(scale, out.dtype).view(_UNSIGNED[out.itemsize]))
        self.out = out
        self.pointers = (ctypes.c_void_p * 3)(out.ctypes.data, None, None)
        self.values = (ctypes.c_int64 * 4)(out.size, threshold, out.itemsize, scale_bits)
        self.function = function
        self.native = ("kernel", function, self.pointers, self.values)

    def before_native(self, steps):
        """Point the kernel at the generator eager would draw from now (set_seed replaces it)."""
        interface = self._generator_of().bit_generator.ctypes
        self.pointers[1] = interface.state_address
        self.pointers[2] = ctypes.cast(interface.next_uint32, ctypes.c_void_p).value

    def after_native(self):
        pass

    def __call__(self):
        self.before_native(1)
        self.function(ctypes.addressof(self.pointers), ctypes.addressof(self.values))


def mask_kernel(node, out):
    """A MaskKernel for a bernoulli_mask node writing `out`, or None (no compiler, odd buffer)."""
    if not isinstance(out, np.ndarray) or out.dtype.kind != "f" or out.itemsize not in _UNSIGNED:
        return None
    if not out.flags.c_contiguous or out.size == 0:
        return None
    function = _function()
    if function is None:
        return None
    return MaskKernel(function, out, node.attrs["keep_prob"], node.attrs.get("seed"))


__all__ = ["MaskKernel", "mask_kernel", "threshold_and_scale"]
