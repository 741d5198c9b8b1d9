"""Does measured placement give the same plan twice? Each zoo model is compiled twice with
``[compile] remeasure = true`` (every partition, the search and the whole-model check timed
anew, as from an empty cache), in one process, with every installed backend (or ``--config``).

    .venv/bin/python bench/repeat.py --models P1,P2,mobilenetv3-ts [--times 2] [--config dnnl]

Per compile: the seconds it took, the backend partitions of the plan (backend and node count),
the whole-model check (kept or not, its interval and rounds) and the most of the CPUs other
processes took during one of its timings (``~``: one was disturbed, its partition returned);
then whether the plans agree, and at the end how many models agree. Models and configs are
bench/zoo.py's.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import byoc
from machine import print_machine
from zoo import CONFIGS, config_of, select
from zoo_models import zoo


def plan_of(compiled: byoc.CompiledModel) -> tuple[tuple[str, int], ...]:
    return tuple(
        sorted(
            (p.backend, len(p.nodes))
            for p in compiled.plan.partitions
            if p.backend != "onnxruntime"
        )
    )


def others_of(compiled: byoc.CompiledModel) -> str:
    """``; others took up to 3% of the CPUs`` over the compile's timings (``~`` when one was
    disturbed: its verdict was not cached), or nothing without a reading."""
    placement = compiled.plan.placement
    if placement is None:
        return ""
    ms = [*placement.measurements, *([placement.whole] if placement.whole else [])]
    shares = [m.others for m in ms if m.others is not None]
    if not shares:
        return ""
    mark = " ~" if any(m.disturbed for m in ms) else ""
    return f"; others took up to {max(shares):.0%} of the CPUs{mark}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", required=True, help="comma-separated names or patterns")
    parser.add_argument("--config", default="all", choices=list(CONFIGS))
    parser.add_argument("--times", type=int, default=2, help="compiles per model")
    args = parser.parse_args(argv)
    everything = zoo()
    models = select(list(everything), args.models, "model")
    print_machine()
    agree = 0
    for name in models:
        model = everything[name]
        path = model.path()
        cfg = config_of(model, args.config)
        cfg.setdefault("compile", {})["remeasure"] = True
        plans = []
        for k in range(args.times):
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the plan says what the warnings would
                compiled = byoc.compile(path, cfg)
            plans.append(plan_of(compiled))
            whole = compiled.plan.placement.whole if compiled.plan.placement else None
            check = "-"
            if whole is not None and whole.interval is not None:
                lo, hi = whole.interval
                verdict = "kept" if whole.kept else "onnxruntime"
                check = f"{verdict} [{lo:.2f}, {hi:.2f}] over {whole.samples}"
            seconds = time.perf_counter() - start
            print(
                f"{name} #{k + 1}: {seconds:.1f} s, {list(plans[-1])}, whole model {check}"
                f"{others_of(compiled)}"
            )
        same = all(p == plans[0] for p in plans)
        agree += same
        print(f"{name}: {'same plan' if same else 'DIFFERENT plans'}", flush=True)
    print(f"{agree} of {len(models)} models got the same plan on all {args.times} compiles")
    return 0 if agree == len(models) else 1


if __name__ == "__main__":
    sys.exit(main())
