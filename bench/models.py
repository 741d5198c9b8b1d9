"""End-to-end time of byoc against onnxruntime on the real models (P1..P5), one process.

    python bench/models.py --config dnnl                 # {"backends": ["dnnl"]}
    python bench/models.py --config dnnl,ccompiler --models P1,P2
    python bench/models.py --config byoc.toml --repeat 50
    python bench/models.py --codegen json,c              # dnnl's two codegens side by side

For each model: compile with the given config (input shapes from MODELS.md), then time
``CompiledModel.run`` and an onnxruntime session on the same inputs, interleaved (byoc,
onnxruntime, byoc, ...) after a warm-up, and print the ratio of the medians (< 1: byoc is
faster). A short idle gap separates runs.

The onnxruntime baseline runs with ``session.intra_op.allow_spinning=0``. Only the benchmark puts
both in one process, and a spinning onnxruntime pool there slows oneDNN's OpenMP threads about
10x (P1: byoc 13.1 ms beside a spinning session, 1.2 ms beside a non-spinning one), while the
baseline itself is no slower without spinning (P1: 1.5 ms vs 1.8 ms). ``--spinning-baseline``
measures the default-spinning session instead.

``--codegen json,c`` compiles each model once per dnnl codegen (``[backend.dnnl] codegen``) and
times them all with onnxruntime, interleaved, printing each one's ratio and the ratio between
the first two.

When the config uses dnnl, it also times each oneDNN kernel inside the real partitions
(blocked layouts, fused post-ops) and prints the convolutions' achieved GFLOP/s against the
measured FP32 peak (a large FMA-bound oneDNN dense layer; ``--peak`` overrides).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import byoc
import numpy as np
import onnxruntime as ort
from byoc.testing.models import MODELS, fetch
from machine import print_machine


def config_for(spec: str, model_id: str) -> Any:
    """``dnnl`` / ``dnnl,ccompiler`` -> a backends dict; a path -> that TOML file's config."""
    shapes = MODELS[model_id].shapes
    if Path(spec).is_file():
        cfg = byoc.load_config(spec)
        for name, dims in shapes.items():
            cfg.shapes.setdefault(name, dims)
        return cfg
    # static: the backends' own speed, not measured placement handing partitions back
    return {
        "backends": [b for b in spec.split(",") if b],
        "shapes": shapes,
        "compile": {"placement": "static"},
    }


def with_codegen(cfg: Any, mode: str) -> Any:
    """``cfg`` with ``[backend.dnnl] codegen = mode``."""
    cfg = byoc.load_config(cfg)
    cfg.backend.setdefault("dnnl", {})["codegen"] = mode
    return cfg


def interleaved(fns: list[Callable[[], Any]], repeat: int, warmup: int, gap: float) -> list[float]:
    """Median seconds of each function, run in turn ``repeat`` times after ``warmup`` rounds."""
    times: list[list[float]] = [[] for _ in fns]
    for i in range(warmup + repeat):
        for fn, ts in zip(fns, times, strict=True):
            time.sleep(gap)
            start = time.perf_counter()
            fn()
            if i >= warmup:
                ts.append(time.perf_counter() - start)
    return [statistics.median(ts) for ts in times]


def measure_peak() -> float:
    """FP32 GFLOP/s of a large FMA-bound dense layer (a matmul kernel, which oneDNN may run as a
    1x1 convolution) run by the dnnl backend's native runtime."""
    from byoc_dnnl.codegen import FORMAT, Artifact
    from byoc_dnnl.runtime import Runtime

    n = 1024
    graph = {
        "format": FORMAT,
        "symbol": "peak",
        "arg_nodes": [0],
        "heads": [2],
        "nodes": [
            {"op": "input", "name": "a", "shape": [n, n], "dtype": "float32"},
            {"op": "const", "name": "b", "shape": [n, n], "dtype": "float32"},
            {
                "op": "kernel",
                "name": "peak",
                "kind": "matmul",
                "inputs": [0, 1, -1],
                "shape": [n, n],
                "attrs": {},
                "post_ops": [],
            },
        ],
    }
    rt = Runtime(Artifact(json.dumps(graph), {"b": np.ones((n, n), np.float32)}), {})
    a = np.ones((n, n), np.float32)
    best = min(interleaved([lambda: rt.run([a])], 10, 3, 0.0))
    return 2 * n**3 / best / 1e9


def conv_flops(node: dict[str, Any], shapes: list[list[int]]) -> float:
    """2 * MACs of a conv kernel node from its output shape and weights shape."""
    out, wshape = node["shape"], shapes[node["inputs"][1]]
    per_out = int(np.prod(wshape[-(len(out) - 1) :]))  # IC/g * k... (last dims of weights)
    return 2.0 * float(np.prod(out)) * per_out


def conv_report(compiled: Any, inputs: dict[str, np.ndarray], peak: float, rounds: int) -> None:
    """Time every conv kernel in the dnnl partitions; print GFLOP/s and % of peak."""
    env = dict(inputs)
    rows = []
    for step in compiled.steps:
        args = [env[n] for n in step.unit.inputs]
        if step.unit.backend != "dnnl" or not hasattr(step.runtime, "profile"):
            env.update(zip(step.unit.outputs, step.runtime.run(args), strict=True))
            continue
        graph = json.loads(step.artifact.source)
        kernels = [n for n in graph["nodes"] if n["op"] == "kernel"]
        shapes = [n["shape"] for n in graph["nodes"]]
        per_kernel: dict[int, list[float]] = {}
        for _ in range(rounds):
            sums: dict[int, float] = {}
            for k, seconds in step.runtime.profile(args):
                sums[k] = sums.get(k, 0.0) + seconds
            for k, s in sums.items():
                per_kernel.setdefault(k, []).append(s)
        for k, node in enumerate(kernels):
            if node["kind"] == "conv" and k in per_kernel:
                t = statistics.median(per_kernel[k])
                dense = len(shapes[node["inputs"][1]]) == len(node["shape"])
                rows.append((conv_flops(node, shapes), t, dense, node["name"], node["shape"]))
        env.update(zip(step.unit.outputs, step.runtime.run(args), strict=True))
    if not rows:
        return
    for label, sel in (("all convs", rows), ("dense convs (group=1)", [r for r in rows if r[2]])):
        flops, secs = sum(r[0] for r in sel), sum(r[1] for r in sel)
        if secs:
            gf = flops / secs / 1e9
            print(
                f"    {label:24s} {len(sel):3d} layers  {flops / 1e9:7.2f} GFLOP  "
                f"{secs * 1e3:7.2f} ms  {gf:6.1f} GFLOP/s = {100 * gf / peak:4.0f}% of peak"
            )
    heavy = sorted(rows, key=lambda r: -r[0])[:5]
    for flops, secs, _, name, shape in heavy:
        gf = flops / secs / 1e9
        print(
            f"      {name:28s} out {'x'.join(map(str, shape)):16s} {flops / 1e9:6.3f} GFLOP "
            f"{gf:6.1f} GFLOP/s = {100 * gf / peak:4.0f}%"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="dnnl", help="backend list (a,b) or a TOML path")
    parser.add_argument("--models", default="P1,P2,P3,P4,P5")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--gap", type=float, default=0.01, help="idle seconds between runs")
    parser.add_argument("--peak", type=float, default=None, help="FP32 peak GFLOP/s")
    parser.add_argument(
        "--codegen", default="", help="dnnl codegens to time side by side, e.g. json,c"
    )
    parser.add_argument(
        "--spinning-baseline",
        action="store_true",
        help="let the onnxruntime baseline's threads spin (its default)",
    )
    args = parser.parse_args(argv)
    print_machine()
    uses_dnnl = "dnnl" in args.config
    if args.codegen and not uses_dnnl:
        parser.error("--codegen needs a config that uses dnnl")
    peak = args.peak or (measure_peak() if uses_dnnl else 350.0)
    if uses_dnnl:
        print(f"FP32 peak (oneDNN 1024^3 dense layer): {peak:.0f} GFLOP/s")
    print(f"config: {args.config}")
    for model_id in args.models.split(","):
        path = fetch(model_id)
        cfg = config_for(args.config, model_id)
        modes = [m for m in args.codegen.split(",") if m]
        if modes:
            runs = [byoc.compile(path, with_codegen(cfg, m)) for m in modes]
        else:
            runs = [byoc.compile(path, cfg)]
        compiled = runs[0]
        options = ort.SessionOptions()
        if not args.spinning_baseline:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        inputs = byoc.random_inputs(compiled.plan.model)
        if model_id == "P4":  # the sample rate: 16000 (random values fail inside its If)
            inputs["sr"] = np.full_like(inputs["sr"], 16000)
        if model_id == "P5":  # token ids: [CLS] ... [SEP], as MODELS.md says
            ids = inputs["input_ids"]
            ids[:] = np.random.default_rng(0).integers(1000, 20000, ids.shape)
            ids[:, 0], ids[:, -1] = 101, 102
            inputs["attention_mask"][:] = 1
        *t_byoc, t_ort = interleaved(
            [*(partial(c.run, inputs) for c in runs), partial(session.run, None, inputs)],
            args.repeat,
            args.warmup,
            args.gap,
        )
        parts = ", ".join(f"{p.name}:{len(p.nodes)}" for p in compiled.plan.partitions)
        times = "  ".join(
            f"byoc{f' ({m})' if m else ''} {t * 1e3:8.2f} ms ratio {t / t_ort:5.2f}"
            for m, t in zip(modes or [""], t_byoc, strict=True)
        )
        between = f"  {modes[1]}/{modes[0]} {t_byoc[1] / t_byoc[0]:5.2f}" if len(modes) > 1 else ""
        print(
            f"{model_id}: {times}  onnxruntime {t_ort * 1e3:8.2f} ms{between}   "
            f"partitions [{parts}]"
        )
        if uses_dnnl:
            conv_report(compiled, inputs, peak, rounds=5)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
