"""Fallback overhead: P3 (PP-OCRv4 recogniser) with no backend claiming anything vs plain
onnxruntime, interleaved in one process. Prints the median time ratio byoc / onnxruntime.

    .venv/bin/python bench/fallback_overhead.py [--runs 300] [--model P3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import byoc
import onnxruntime as ort
from byoc.testing.models import MODELS, fetch
from machine import print_machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="P3", choices=sorted(MODELS))
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    print_machine()

    path = fetch(args.model)
    config = {"backends": [], "shapes": MODELS[args.model].shapes}
    compiled = byoc.compile(path, config)
    assert not compiled.plan.partitions and len(compiled.steps) == 1
    plain = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = byoc.random_inputs(compiled.plan.model, config["shapes"])
    names = [o.name for o in plain.get_outputs()]

    def run_byoc() -> None:
        compiled.run(inputs)

    def run_ort() -> None:
        plain.run(names, inputs)

    for _ in range(args.warmup):
        run_byoc()
        run_ort()
    times: dict[str, list[float]] = {"byoc": [], "onnxruntime": []}
    ratios = []
    for i in range(args.runs):
        pair = [("byoc", run_byoc), ("onnxruntime", run_ort)]
        if i % 2:
            pair.reverse()  # alternate who goes first
        got = {}
        for name, fn in pair:
            start = time.perf_counter()
            fn()
            got[name] = time.perf_counter() - start
            times[name].append(got[name])
        ratios.append(got["byoc"] / got["onnxruntime"])
    med_b = statistics.median(times["byoc"]) * 1e3
    med_o = statistics.median(times["onnxruntime"]) * 1e3
    print(f"model {args.model}: {MODELS[args.model].title}, {args.runs} interleaved runs")
    print(f"byoc (nothing claimed) median {med_b:.3f} ms; onnxruntime median {med_o:.3f} ms")
    print(
        f"ratio of medians {med_b / med_o:.4f}; median of per-pair ratios "
        f"{statistics.median(ratios):.4f} (target <= 1.03)"
    )


if __name__ == "__main__":
    main()
