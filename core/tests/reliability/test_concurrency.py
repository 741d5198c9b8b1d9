"""One compiled model, many threads, every backend: each thread gets exactly its own answers;
many runs do not grow memory. bench/reliability.py runs the full 8 x 500 and 10,000 runs."""

from __future__ import annotations

import pytest

from .helpers import FALLBACK, available_backends, compile_on
from .stress import check_threads, memory_growth

BACKENDS = [*available_backends(), FALLBACK]


@pytest.mark.parametrize("backend", BACKENDS)
def test_eight_threads_get_the_outputs_of_lone_runs(backend):
    assert check_threads(compile_on(backend), threads=8, runs=50) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_runs_do_not_grow_memory(backend):
    # A leak of one output per run (~100 bytes) stays below this; a leak of a buffer does not.
    # The bound is generous so that allocator noise cannot flake the test.
    assert memory_growth(compile_on(backend), runs=2000, warmup=200) < 32 << 20
