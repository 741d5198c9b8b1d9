"""Many threads and many runs on one compiled model; used by the tests and bench/reliability.py."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

import byoc
import numpy as np


def thread_inputs(compiled: byoc.CompiledModel, threads: int) -> list[dict[str, np.ndarray]]:
    """Different inputs for each thread, so that outputs mixed between threads would show."""
    out = []
    for i in range(threads):
        inputs = byoc.random_inputs(compiled.plan.model, seed=100 + i)
        out.append({k: np.ascontiguousarray(v) for k, v in inputs.items()})
    return out


def check_threads(compiled: byoc.CompiledModel, threads: int, runs: int) -> list[str]:
    """Run ``threads`` x ``runs`` at once; every output must equal the single-threaded one.

    Returns one line per thread that saw a difference or an error (empty: all identical).
    """
    inputs = thread_inputs(compiled, threads)
    expected = [compiled.run(x) for x in inputs]
    problems: list[str] = []
    start = threading.Barrier(threads)

    def work(i: int) -> None:
        start.wait()
        try:
            for r in range(runs):
                got = compiled.run(inputs[i])
                if not _same(got, expected[i]):
                    problems.append(f"thread {i}, run {r}: outputs differ from a lone run")
                    return
        except Exception as exc:  # reported, not raised: the other threads keep going
            problems.append(f"thread {i}: {type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return problems


def _same(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=True) for k in a
    )


def rss_bytes() -> int:
    """Resident set size of this process now (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_growth(compiled: byoc.CompiledModel, runs: int, warmup: int = 200) -> int:
    """Bytes of resident memory gained over ``runs`` runs, after ``warmup`` runs."""
    inputs = thread_inputs(compiled, 1)[0]
    for _ in range(warmup):
        compiled.run(inputs)
    before = rss_bytes()
    for _ in range(runs):
        compiled.run(inputs)
    return rss_bytes() - before
