"""Tokens per second of the zoo's Llama-style decoder: prefill and KV-cache decode, in separate
processes.

    .venv/bin/python bench/decode.py                      # 5 rounds, every engine (long)
    .venv/bin/python bench/decode.py --rounds 1 --prefill-runs 2 --steps 4 --blocks 1  # a check
    .venv/bin/python bench/decode.py --engines ort,ov,dnnl --json decode.json

The models are ``llama-prefill`` and ``llama-decode`` of ``bench/zoo_models.py`` (built by
``bench/llama_models.py``: hidden 256, 4 heads, 2 KV heads, 2 layers, vocabulary 8192). Engines,
each in a process of its own (``--engines``):

* ``ort``: ``onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])``, default
  session options (what a user writes);
* ``ov``: plain OpenVINO: ``openvino.Core`` reads the same ONNX, reshaped to the zoo's static
  shapes, compiled for "CPU" with ``INFERENCE_PRECISION_HINT`` f32, the latency hint and
  ``--threads`` threads;
* ``byoc``: ``byoc.compile`` with the default config (every installed backend, measured
  placement) and the zoo's shapes;
* ``dnnl``: ``byoc.compile`` with ``backends = ["dnnl"]`` and ``[compile] placement =
  "static"``.

Prefill: one call of ``llama-prefill`` on 128 token ids; prefill tokens/s is 128 over the
median call. Decode: a loop of ``--steps`` steps of ``llama-decode`` (one token in), each
feeding back the ``present`` key/values as the next ``past`` and the greedy next token
(argmax of the logits). byoc.compile needs fixed shapes per call, so the past does not grow:
the decode step is fixed at a past of 127 (128 in the cache after the step) with a sliding
window, the oldest position of each ``present`` dropped before it is fed back (every engine
runs the same loop, the copy included). A growing past under ``byoc.InferenceSession`` would
meet a new signature at every step, each run by onnxruntime until its plan is compiled in the
background, so it would time onnxruntime. The first past is the prefill's cache of the prompt
less its first position. Decode tokens/s is ``--steps`` over the loop's time.

Rounds: each round starts every engine's process (one at a time: byoc's compile measures on
both cores), then asks them in turn, ``--blocks`` times (each engine first in turn, the order
reversed every other block, ``--gap`` idle seconds before each request so the other processes'
threads stop spinning), for ``--prefill-runs`` prefill calls and one decode loop. Reported:
each engine's medians over all blocks and rounds, and their ratios to onnxruntime's (< 1:
faster). The machine (CPU, ISA, compiler, versions) is printed first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import zoo

READY = "DECODE-READY "
TIMES = "DECODE-TIMES "
ENGINES = {
    "ort": "onnxruntime",
    "ov": "plain OpenVINO",
    "byoc": "byoc (default config)",
    "dnnl": "byoc (dnnl, static)",
}
Run = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
PARTITIONS: dict[str, list[str]] = {}  # a byoc child's: model file -> "<backend> <nodes>"


def _session(
    engine: str, path: str, shapes: dict[str, list[int]], fixed: dict, threads: int
) -> Run:
    """One model as ``engine`` runs it: a call from input arrays to output arrays by name."""
    if engine == "ort":
        import onnxruntime as ort

        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return lambda feed: dict(zip(names, session.run(None, feed), strict=True))
    if engine == "ov":
        import openvino as ov

        core = ov.Core()
        model = core.read_model(path)
        model.reshape({name: ov.PartialShape(dims) for name, dims in shapes.items()})
        compiled = core.compile_model(
            model,
            "CPU",
            {
                "INFERENCE_PRECISION_HINT": "f32",
                "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_NUM_THREADS": threads,
            },
        )
        request = compiled.create_infer_request()
        ins = {
            next(n for n in p.get_names() if n in shapes): i for i, p in enumerate(compiled.inputs)
        }
        outs = [(p, _output_name(p.get_names()) or p.get_any_name()) for p in compiled.outputs]

        def run(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            result = request.infer({ins[k]: v for k, v in feed.items()})
            return {name: result[port] for port, name in outs}

        return run
    import byoc

    config: dict[str, Any] = {"shapes": shapes, "compare": {"inputs": fixed}}
    if engine == "dnnl":
        config |= {"backends": ["dnnl"], "compile": {"placement": "static"}}
    compiled_model = byoc.compile(path, config)
    PARTITIONS[os.path.basename(path)] = [
        f"{p.backend} {len(p.nodes)}" for p in compiled_model.plan.partitions
    ]
    return compiled_model.run


def _output_name(names: set[str]) -> str | None:
    """The model's name of an OpenVINO output port (a port has several: the values it
    aliases, such as the rotary Add a prefill's ``present.0.key`` is an Identity of)."""
    return next((n for n in sorted(names) if n == "logits" or n.startswith("present.")), None)


def child(job: dict[str, Any]) -> int:
    """Compile both models in this process and warm up, then time on request.

    Prints ``DECODE-READY {...}``; then for each line ``prefill N`` runs N prefill calls and
    for ``decode N`` one loop of N decode steps, printing ``DECODE-TIMES [seconds, ...]`` (one
    per call, one per step). A failure prints ``{"error": ...}`` and ends the child."""
    import zoo_models

    out: dict[str, Any] = {}
    try:
        models = zoo_models.zoo()
        pre, dec = models["llama-prefill"], models["llama-decode"]
        start = time.perf_counter()
        prefill = _session(job["engine"], str(pre.path()), pre.shapes, pre.fixed, job["threads"])
        decode = _session(job["engine"], str(dec.path()), dec.shapes, dec.fixed, job["threads"])
        out["load_s"] = time.perf_counter() - start
        out["partitions"] = PARTITIONS
        prompt = {"input_ids": np.asarray(pre.fixed["input_ids"], np.int64)}
        layers = [k.removeprefix("past_key_values.") for k in dec.shapes if k != "input_ids"]

        def loop(steps: int) -> list[float]:
            """``steps`` decode steps from the prompt's cache, sliding by one each step."""
            cache = prefill(prompt)
            token = np.argmax(cache["logits"][:, -1:], axis=-1)
            past = {f"past_key_values.{k}": cache[f"present.{k}"][:, :, 1:] for k in layers}
            times = []
            for _ in range(steps):
                begin = time.perf_counter()
                feed = {k: np.ascontiguousarray(v) for k, v in past.items()}
                result = decode({"input_ids": token, **feed})
                token = np.argmax(result["logits"][:, -1:], axis=-1)
                past = {f"past_key_values.{k}": result[f"present.{k}"][:, :, 1:] for k in layers}
                times.append(time.perf_counter() - begin)
            return times

        def calls(n: int) -> list[float]:
            times = []
            for _ in range(n):
                begin = time.perf_counter()
                prefill(prompt)
                times.append(time.perf_counter() - begin)
            return times

        calls(2)
        loop(8)
        out["tokens"] = int(prompt["input_ids"].shape[1])
    except Exception as exc:  # one error line for the parent
        out["error"] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
    print(READY + json.dumps(out), flush=True)
    if "error" in out:
        return 1
    for line in sys.stdin:
        what, n = line.split()
        try:
            times = calls(int(n)) if what == "prefill" else loop(int(n))
        except Exception as exc:
            print(TIMES + json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
            return 1
        print(TIMES + json.dumps(times), flush=True)
    return 0


class Child(zoo.Child):
    """One ``child`` process, driven line by line over its stdin and stdout."""

    def __init__(self, job: dict[str, Any], timeout: float) -> None:
        super().__init__(job, timeout, __file__, ENGINES[job["engine"]])

    def ask(self, what: str, n: int) -> list[float]:
        return self.times(n, what, TIMES)


def measure(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Per engine: the prefill calls' and decode steps' seconds, each block's median."""
    engines = args.engines.split(",")
    found: dict[str, dict[str, list[float]]] = {
        e: {"prefill": [], "decode": [], "load_s": []} for e in engines
    }
    job = {"threads": args.threads}
    for r in range(args.rounds):
        children: dict[str, Child] = {}
        try:
            for engine in engines:  # one at a time: a compile measures on both cores
                children[engine] = Child({**job, "engine": engine}, args.timeout)
                ready = children[engine].reply(READY)
                found[engine]["load_s"].append(ready["load_s"])
                if ready["partitions"] and r == 0:
                    print(f"{ENGINES[engine]}: partitions {ready['partitions']}", flush=True)
            for block in range(args.blocks):
                turn = (r * args.blocks + block) % len(engines)
                order = engines[turn:] + engines[:turn]
                if block % 2:
                    order.reverse()
                for engine in order:
                    for what, n in (("prefill", args.prefill_runs), ("decode", args.steps)):
                        time.sleep(args.gap)  # the others' idle threads stop spinning
                        times = children[engine].ask(what, n)
                        found[engine][what].append(statistics.median(times))
                        if what == "decode":  # the loop's tokens per second, as a mean step
                            found[engine].setdefault("loop", []).append(sum(times) / len(times))
        finally:
            for c in children.values():
                c.close()
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    return found


def table(found: dict[str, dict[str, list[float]]], tokens: int) -> list[str]:
    """One line per engine: prefill ms and tokens/s, decode ms per token and tokens/s, and
    each as a ratio of onnxruntime's time."""
    med = {e: {k: statistics.median(v) for k, v in f.items() if v} for e, f in found.items()}
    base = med.get("ort", {})
    lines = [
        f"{'engine':22s} {'prefill ms':>10s} {'tok/s':>8s} {'ratio':>6s}  "
        f"{'decode ms':>9s} {'tok/s':>8s} {'ratio':>6s}  {'load s':>6s}"
    ]
    for engine, m in med.items():
        ratio = {
            k: f"{m[k] / base[k]:.3f}" if k in base and k in m else "-" for k in ("prefill", "loop")
        }
        lines.append(
            f"{ENGINES[engine]:22s} {m['prefill'] * 1e3:10.2f} {tokens / m['prefill']:8.0f} "
            f"{ratio['prefill']:>6s}  {m['loop'] * 1e3:9.3f} {1 / m['loop']:8.0f} "
            f"{ratio['loop']:>6s}  {m['load_s']:6.1f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default=",".join(ENGINES), help="of " + ", ".join(ENGINES))
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per round")
    parser.add_argument("--blocks", type=int, default=3, help="requests per engine per round")
    parser.add_argument("--prefill-runs", type=int, default=20, help="prefill calls per block")
    parser.add_argument("--steps", type=int, default=64, help="decode steps per block")
    parser.add_argument("--gap", type=float, default=0.5, help="idle seconds before a block")
    parser.add_argument("--threads", type=int, default=2, help="OpenVINO's threads")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per reply")
    parser.add_argument("--json", help="write the per-block medians here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    unknown = set(args.engines.split(",")) - set(ENGINES)
    if unknown:
        parser.error(f"unknown engines {sorted(unknown)}: choose from {', '.join(ENGINES)}")
    import llama_models
    from machine import print_machine

    print_machine()
    print(
        f"llama-prefill: {llama_models.SEQ} tokens; llama-decode: one token after "
        f"{llama_models.PAST} (sliding window); {args.rounds} round(s) x {args.blocks} block(s)"
        f" of {args.prefill_runs} prefill call(s) and {args.steps} decode step(s); medians"
    )
    found = measure(args)
    print("\n".join(table(found, llama_models.SEQ)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(found, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
