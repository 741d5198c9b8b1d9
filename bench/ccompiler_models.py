"""Real models P1-P3 with the ccompiler backend vs plain onnxruntime, end to end.

    .venv/bin/python bench/ccompiler_models.py [--models P1 P2 P3] [--runs 50]

For each model: what ccompiler claims (partitions, nodes), whether ``byoc compare`` passes, and
the median time ratio byoc / onnxruntime, interleaved in one process after a warm-up
(target: <= 1.05).
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
    parser.add_argument("--models", nargs="+", default=["P1", "P2", "P3"])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    print_machine()
    for model_id in args.models:
        path = fetch(model_id)
        config = {
            "backends": ["ccompiler"],
            "shapes": MODELS[model_id].shapes,
            "compile": {"placement": "static"},  # the backend's own speed
        }
        compiled = byoc.compile(path, config)
        plan = compiled.plan
        claimed = sum(len(p.nodes) for p in plan.partitions)
        report = byoc.compare(path, config)
        plain = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        inputs = byoc.random_inputs(plan.model, config["shapes"])
        names = [o.name for o in plain.get_outputs()]
        runs = {
            "byoc": lambda c=compiled, x=inputs: c.run(x),
            "ort": lambda s=plain, n=names, x=inputs: s.run(n, x),
        }
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.warmup):
            for fn in runs.values():
                fn()
        for _ in range(args.runs):
            for name, fn in runs.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"{model_id}: {len(plan.partitions)} ccompiler partition(s), {claimed} node(s) "
            f"claimed; compare {'passed' if report.passed else 'FAILED'}; "
            f"byoc {med['byoc'] * 1e3:.2f} ms, onnxruntime {med['ort'] * 1e3:.2f} ms, "
            f"ratio {med['byoc'] / med['ort']:.3f}"
        )


if __name__ == "__main__":
    main()
