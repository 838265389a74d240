// Where an OpenMP worker thread runs. Kernel threads spin briefly after a parallel region (GOMP_SPINCOUNT,
// set by mstrain._threads) so the next region of a training step starts without a wake-up; on 2 cores the
// scheduler then sometimes stacked the spinning worker on the core of the thread that drives the step (both
// on CPU 1 for seconds, CPU 0 idle: W6 steps 2x slower than on one thread). A worker placed on a core of
// its own leaves the scheduler one choice, moving the driving thread, which stays free to run anywhere.
#pragma once

#ifdef __linux__
#include <sched.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mstrain {

// Called by each thread of a parallel region: the first time a worker (thread number t > 0) runs here it
// is placed on the t-th CPU of the process's set, counted from the last, when this process may run on
// exactly as many CPUs as it runs threads (one process on the machine, or an MPI rank bound to its
// cores); otherwise (ranks sharing cores unbound) workers keep the whole set, as placing them would
// put the workers of several processes on the same CPUs. The calling thread (t = 0) is never placed.
inline void place_worker_thread() {
#if defined(__linux__) && defined(_OPENMP)
    thread_local bool placed = false;
    if (placed) return;
    placed = true;
    const int t = omp_get_thread_num();
    if (t == 0) return;
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
    const int count = CPU_COUNT(&allowed);
    if (count != omp_get_max_threads() || t >= count) return;
    int seen = 0;
    for (int cpu = CPU_SETSIZE - 1; cpu >= 0; --cpu) {
        if (!CPU_ISSET(cpu, &allowed)) continue;
        if (++seen == t) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            sched_setaffinity(0, sizeof(one), &one);
            return;
        }
    }
#endif
}

}  // namespace mstrain
