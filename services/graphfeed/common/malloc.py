"""glibc ``malloc`` settings of a long-running service process (``mallopt``).

Why a graph-store's RSS grew while it served (310 -> 866 MiB in issue 30's run; 210 -> 283
MiB per store on a 200k-node graph here, of which +42 MiB anonymous): every answer is a numpy
buffer of up to tens of MiB. glibc maps such a buffer and unmaps it when freed, but after the
first free it raises its mmap threshold (up to 32 MiB), so later answers come from the heap and
stay there when freed; and each gRPC handler thread gets an arena of its own (up to 8 per core).
A fixed threshold (which also stops it from sliding) and a few arenas give that memory back:
+6 MiB anonymous after the same 20 steps. The rest of the growth is the topology's memory-mapped
pages (file-backed, clean: the kernel reclaims them under a memory limit), see ``RssFile``.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # malloc.h
M_ARENA_MAX = -8


def tune_malloc(arena_max: int, mmap_threshold_bytes: int) -> bool:
    """Sets glibc's arena count and a fixed mmap threshold; call before threads start.

    Args:
        arena_max: most malloc arenas (0: leave glibc's default).
        mmap_threshold_bytes: allocations of at least this size are mapped on their own and
            returned to the kernel when freed (0: leave glibc's sliding threshold).

    Returns:
        True when every value asked for was taken; False where the C library is not glibc or
        refused one (glibc documents thresholds up to 32 MiB on 64-bit).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        log.warning("not glibc: malloc settings left as they are")
        return False
    ok = True
    for param, value in ((M_ARENA_MAX, arena_max), (M_MMAP_THRESHOLD, mmap_threshold_bytes)):
        if value > 0 and mallopt(param, value) != 1:
            log.warning("mallopt(%d, %d) refused", param, value)
            ok = False
    return ok
