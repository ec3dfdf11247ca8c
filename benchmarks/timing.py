"""Timing shared by the benchmarks: the median of repeated in-process runs."""

import statistics
import time


def median_time(fn, repeat: int, warm_up: bool = True) -> float:
    """Median seconds of ``repeat`` calls of ``fn`` (after one untimed call)."""
    if warm_up:
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)
