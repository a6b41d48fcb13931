"""CPU memory kept for reuse by every process of an evaluation, as CUDA's caching allocator keeps device memory.

glibc's malloc gives a block over 32 MB its own mmap and unmaps it when freed, and gives the top of its heap back
past a small threshold, so a CPU call whose output is a fresh 64 MB tensor spends most of its time in page faults
(axpby on 2**24 floats in a thread: 66.8 ms a call, most of it system time, against 21.1 ms with the heap kept;
medians of five, benchmarks/cpu_heap.py). The children (candidate, baselines, reference worker) start with KEEP_HEAP
in their environment; the process that hosts a CPU evaluation (its inputs, the reference's calls, the comparisons)
calls keep_heap(). A CPU timing then measures the kernel, for the candidate and the baselines alike, and the
evaluator's own work stops paying the kernel for zeroed pages. The price is the heap's peak, held until the process
ends.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

TRIM_THRESHOLD_BYTES = 2**31 - 1  # the top of the heap is given back only past 2 GB free (mallopt takes an int)
# the children's GLIBC_TUNABLES: one arena, no block of its own mapping, the top kept
KEEP_HEAP = f"glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold={TRIM_THRESHOLD_BYTES}"
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8  # mallopt's parameters (malloc.h)


@functools.cache
def keep_heap() -> bool:
    """This process's malloc keeps what it frees from now on; False where the C library is not glibc."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    # one arena: a thread's own arena maps every block over its 64 MB heaps whatever mmap_max says
    settings = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    return all([bool(mallopt(param, value)) for param, value in settings])
