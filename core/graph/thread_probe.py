"""The thread probe of a loop-sunk step: one OpenMP thread or all, whichever runs the step faster now.

A compiled step splits its large kernels over the OpenMP threads (thin products, flat elementwise
loops, row kernels), and every kernel gives the same bits on any thread count. On a virtual machine
whose host at times runs two vCPUs on one physical core, two busy threads each run at half speed
for seconds to minutes: W6's step then took 190-240 us on two threads against 155 on one (and 101-105
on two outside such phases). So the C step loop (`ms_loop` in mstrain.graph.native) measures: every
`period` steps it runs `PROBE_STEPS` steps with the setting not in use, then as many with the one in
use, and takes the other when it was faster by its median step in two probes in a row (each run's
first step is left out: it moves the step's data between the cores' caches; one probe alone was
sometimes misled by the first steps of a loop). After a first win the second probe follows at once,
so a slow phase is left about 25 steps after a probe finds it. A loop's first probe starts after
_FIRST_PROBE_AFTER steps. Outside such phases the probe costs its few slower steps per period (W6:
6 steps of 500, about 0.6 %).

MSTRAIN_THREAD_PROBE=N sets the period in steps (default 500); 0 turns the probe off. It is off in a
multi-rank job (each rank's step waits on the others, so its time says little about its own threads)
and when the process runs one OpenMP thread. OpenBLAS's threads (products above
native_blas.SMALL_GEMM_WORK) are not OpenMP threads and are not probed.
"""
import os

import numpy as np

from ..errors import ConfigError
from ..log import world_size

PROBE_STEPS = 6            # steps of each measured run (the first left out of its median)
_DEFAULT_PERIOD = 500
_MARGIN = 0.05             # the other setting must be this much faster to be taken
_FIELDS = ("period", "steps", "position", "one_thread", "one_thread_steps", "switches", "wins")
_AT = {name: k for k, name in enumerate(_FIELDS)}  # the C enum PROBE_<NAME> is generated from _FIELDS
_WINS_TO_SWITCH = 2        # probes in a row the other setting must win
_FIRST_PROBE_AFTER = 100   # steps (at most a period): a loop's first steps warm caches and workers up
_MAX_STEPS = 16

# The probe in C, part of the step runner's source (mstrain.graph.native). State: a float64 array
# (state()): the fields of _FIELDS, then the step times of the two runs of the probe in progress.
SOURCE = r"""
#ifdef _OPENMP
#include <omp.h>
static int probe_max_threads() { return omp_get_max_threads(); }
static void probe_set_threads(int n) { omp_set_num_threads(n); }
#else
static int probe_max_threads() { return 1; }
static void probe_set_threads(int) {}
#endif
enum { %(fields)s, PROBE_TIMES };

/* the median of t[1..n) (t[0], the run's first step, moves data between caches) */
static double probe_median(const double* t, int64_t n) {
  double rest[%(max_steps)d];
  const int64_t m = n - 1;
  for (int64_t i = 0; i < m; ++i) rest[i] = t[i + 1];
  std::sort(rest, rest + m);
  return m %% 2 ? rest[m / 2] : 0.5 * (rest[m / 2 - 1] + rest[m / 2]);
}

/* 1: the next step runs on one thread, 0: on all */
extern "C" int64_t ms_probe_setting(const double* st) {
  const int64_t current = static_cast<int64_t>(st[PROBE_ONE_THREAD]);
  return static_cast<int64_t>(st[PROBE_POSITION]) < static_cast<int64_t>(st[PROBE_STEPS]) ? 1 - current : current;
}

/* the step just run took `seconds`: kept while a probe measures; at its end the other setting wins
   or not, and is taken after %(wins)d wins in a row (after a win the next probe starts at once) */
extern "C" void ms_probe_record(double* st, double seconds) {
  const int64_t steps = static_cast<int64_t>(st[PROBE_STEPS]);
  const int64_t position = static_cast<int64_t>(st[PROBE_POSITION]);
  int64_t next = (position + 1) %% static_cast<int64_t>(st[PROBE_PERIOD]);
  if (position < 2 * steps) st[PROBE_TIMES + position] = seconds;
  if (position == 2 * steps - 1) {
    const bool won = probe_median(st + PROBE_TIMES, steps) <
                     (1.0 - %(margin)r) * probe_median(st + PROBE_TIMES + steps, steps);
    st[PROBE_WINS] = won ? st[PROBE_WINS] + 1.0 : 0.0;
    if (st[PROBE_WINS] >= %(wins)d) {
      st[PROBE_ONE_THREAD] = 1.0 - st[PROBE_ONE_THREAD];
      st[PROBE_SWITCHES] += 1.0;
      st[PROBE_WINS] = 0.0;
    } else if (won) {
      next = 0;
    }
  }
  st[PROBE_POSITION] = static_cast<double>(next);
}
""" % {"max_steps": _MAX_STEPS, "margin": _MARGIN, "wins": _WINS_TO_SWITCH,
       "fields": ", ".join("PROBE_" + name.upper() for name in _FIELDS)}


def period():
    """The probe's period in steps from MSTRAIN_THREAD_PROBE (0: off)."""
    text = os.environ.get("MSTRAIN_THREAD_PROBE", "").strip()
    if not text:
        return _DEFAULT_PERIOD
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"a number of steps (0: off), got {text!r}", source="MSTRAIN_THREAD_PROBE") from None
    if value != 0 and not 2 * PROBE_STEPS < value:
        raise ConfigError(f"0 or more than {2 * PROBE_STEPS} steps, got {value}", source="MSTRAIN_THREAD_PROBE")
    return value


def state():
    """A new probe's state for a program's C loop, or None when the probe is off."""
    steps = period()
    if steps == 0 or world_size() > 1:
        return None
    st = np.zeros(len(_FIELDS) + 2 * _MAX_STEPS, np.float64)
    st[_AT["period"]], st[_AT["steps"]] = steps, PROBE_STEPS
    st[_AT["position"]] = max(2 * PROBE_STEPS, steps - _FIRST_PROBE_AFTER)
    return st


def report(st):
    """{field: value} of a probe's state (None: no probe)."""
    if st is None:
        return None
    return {name: int(st[k]) for k, name in enumerate(_FIELDS)}
