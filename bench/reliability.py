"""Reliability figures (issue #6): malformed models fuzzed, threads x runs checked per backend,
resident memory growth per backend over many runs.

    .venv/bin/python bench/reliability.py [--fuzz 1500] [--threads 8] [--runs 500] [--mem 10000]

The cases come from core/tests/reliability (fuzz_models.py, stress.py, helpers.py).
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
import traceback
import warnings
from pathlib import Path

import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core/tests/reliability"))

import fuzz_models
import helpers
import stress

# Inputs that once escaped as something other than a ByocError; each has a regression test in
# core/tests/reliability/ and is fixed where named.
FIXED = [
    "numpy ValueError 'array is too big' for huge input dims (compare.random_inputs)",
    "onnxruntime Fail/InvalidArgument when the reference session refuses a model (compare)",
    "KeyError in onnx.helper for an initializer of unknown element type (graph: initializers "
    "checked in specialize)",
    "initializer raw_data shorter than its dims need (graph: initializers checked)",
    "dead code: a partition or segment with no outputs broke examplejson and onnxruntime "
    "(passes/partition: dead units dropped)",
    "backend returning None / wrong count / non-arrays: TypeError in the executor (executor: "
    "results checked, BackendError)",
    "onnxruntime failing while rerunning a failed partition escaped raw (executor)",
]


def fuzz(cases: int) -> tuple[int, collections.Counter[str], list[str]]:
    outcomes: collections.Counter[str] = collections.Counter()
    escapes: list[str] = []
    inputs = 0
    for seed in range(cases):
        rnd = random.Random(seed)
        base = rnd.choice(sorted(fuzz_models.BASES))
        names = rnd.sample(sorted(fuzz_models.MUTATIONS), rnd.randint(1, 3))
        to_bytes = rnd.random() < 0.15
        for config in fuzz_models.CONFIGS:
            inputs += 1
            try:
                model = fuzz_models.mutate(base, names, seed, to_bytes)
                outcomes[fuzz_models.exercise(model, config)] += 1
            except Exception as exc:
                last = traceback.extract_tb(exc.__traceback__)[-1]
                escapes.append(
                    f"seed {seed} {base} {names} bytes={to_bytes} {config}: "
                    f"{type(exc).__name__} at {Path(last.filename).name}:{last.lineno}: {exc}"
                )
    return inputs, outcomes, escapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fuzz", type=int, default=1500, help="mutated models (x 2 configs)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--runs", type=int, default=500, help="runs per thread")
    parser.add_argument("--mem", type=int, default=10_000, help="runs for the memory figure")
    args = parser.parse_args()
    ort.set_default_logger_severity(4)  # malformed models make onnxruntime log; byoc reports
    warnings.simplefilter("ignore")

    start = time.perf_counter()
    inputs, outcomes, escapes = fuzz(args.fuzz)
    print(
        f"fuzz: {inputs} malformed-model runs ({args.fuzz} models x 2 configs) in "
        f"{time.perf_counter() - start:.0f} s"
    )
    print("  outcomes: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()))
    print(f"  escapes (not a ByocError) now: {len(escapes)}")
    for line in escapes[:10]:
        print(f"    {line}")
    print(f"  failures found and fixed: {len(FIXED)}")
    for line in FIXED:
        print(f"    - {line}")

    backends = [*helpers.available_backends(), helpers.FALLBACK]
    print(
        f"\nthreads: {args.threads} threads x {args.runs} runs on one compiled model, "
        "outputs compared with lone runs"
    )
    for backend in backends:
        compiled = helpers.compile_on(backend)
        start = time.perf_counter()
        problems = stress.check_threads(compiled, args.threads, args.runs)
        verdict = "identical" if not problems else f"{len(problems)} PROBLEM(S): {problems[:3]}"
        print(
            f"  {backend:12s} {args.threads * args.runs:6d} runs  {verdict}  "
            f"({time.perf_counter() - start:.1f} s)"
        )

    print(
        f"\nmemory: resident memory growth over {args.mem} runs after 500 warm-up runs (bound 5 MB)"
    )
    for backend in backends:
        compiled = helpers.compile_on(backend)
        grown = stress.memory_growth(compiled, args.mem, warmup=500)
        verdict = "ok" if grown < 5 << 20 else "OVER"
        print(f"  {backend:12s} {grown / (1 << 20):+7.2f} MB  {verdict}")


if __name__ == "__main__":
    main()
