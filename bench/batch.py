"""Throughput of ``byoc batch`` on Ray against a plain loop over onnxruntime in one process.

    python bench/batch.py --models P1,P2 --config dnnl --rounds 3

Each model gets a directory of random ``.npz`` samples (its MODELS.md shapes). Timed, in
interleaved rounds:

- ``ort loop``: one onnxruntime session (default threads) reading each sample, running it and
  writing its outputs, one after another;
- ``byoc batch WxT``: ``byoc.ray.run_batch`` on a local Ray, W workers of T threads each, on a
  ``.byoc`` file compiled once with ``--config``; reading, checking and writing included.

Prints samples/s (medians over rounds) and each byoc run's ratio to the loop (above 1: faster).
Starting the workers (each loads the ``.byoc`` file) is printed apart: it is paid once per run,
not per sample.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import byoc
import numpy as np
import onnxruntime as ort
import ray
from byoc.batch import read_sample, sample_files, write_sample
from byoc.ray import run_batch
from byoc.testing.models import fetch
from machine import print_machine
from models import config_for

CORES = os.cpu_count() or 1
LAYOUTS = [(1, CORES), (CORES, 1)]  # (workers, threads): all of the machine's cores either way


def make_samples(compiled: Any, count: int, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        inputs = byoc.random_inputs(compiled.inputs, seed=i)
        np.savez(directory / f"{i:05d}.npz", **inputs)


def ort_loop(path: Path, inputs: Path, outputs: Path, signature: Any) -> float:
    """Seconds for one process to read, run and write every sample with plain onnxruntime."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outputs.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for file in sample_files(inputs):
        sample = read_sample(file, signature)
        write_sample(outputs / file.name, dict(zip(names, session.run(names, sample), strict=True)))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="P1,P2")
    parser.add_argument("--config", default="dnnl", help="backends, or a TOML file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="work per timed run, roughly")
    args = parser.parse_args(argv)
    print_machine()
    ray.init(address="local", include_dashboard=False, logging_level="ERROR")
    print(f"{'model':8s} {'samples':>7s}  {'ort loop':>10s}  ", end="")
    print("  ".join(f"{f'byoc {w}x{t}':>20s}" for w, t in LAYOUTS) + "  (samples/s; ratio)")
    try:
        for model_id in args.models.split(","):
            bench_model(model_id, args)
    finally:
        ray.shutdown()
    return 0


def bench_model(model_id: str, args: argparse.Namespace) -> None:
    path = fetch(model_id)
    compiled = byoc.compile(path, config_for(args.config, model_id))
    with tempfile.TemporaryDirectory(prefix="byoc-bench-batch-") as tmp:
        root = Path(tmp)
        artifact = compiled.save(root / "model.byoc")
        # size the run from one timed sample: about --seconds of onnxruntime work
        one = root / "one"
        make_samples(compiled, 3, one)
        per = ort_loop(path, one, root / "out-one", compiled.inputs) / 3
        count = max(20, min(2000, int(args.seconds / max(per, 1e-4))))
        make_samples(compiled, count, root / "in")
        rates: dict[str, list[float]] = {"ort": []}
        startup: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            seconds = ort_loop(path, root / "in", root / "out-ort", compiled.inputs)
            rates["ort"].append(count / seconds)
            for workers, threads in LAYOUTS:
                key = f"{workers}x{threads}"
                report = run_batch(
                    artifact, root / "in", root / f"out-{key}", workers=workers, threads=threads
                )
                if not report.passed:
                    sys.exit(f"{model_id}: byoc batch failed: {report.failed[:3]}")
                rates.setdefault(key, []).append(report.total / report.seconds)
                startup.setdefault(key, []).append(report.startup_seconds)
        base = statistics.median(rates["ort"])
        cells = []
        for workers, threads in LAYOUTS:
            key = f"{workers}x{threads}"
            rate = statistics.median(rates[key])
            cells.append(
                f"{rate:8.1f}; {rate / base:4.2f}x ({statistics.median(startup[key]):.1f} s)"
            )
        print(f"{model_id:8s} {count:7d}  {base:10.1f}  " + "  ".join(f"{c:>20s}" for c in cells))
        print(f"{'':8s} (worker start-up in parentheses; config {args.config})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
