"""Comparing byoc's outputs with onnxruntime's on the same inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort

from byoc import host
from byoc.compiled import CompiledModel
from byoc.compiler import compile
from byoc.config import Config, load_config
from byoc.context import ConfigLike
from byoc.errors import InputError, ModelError
from byoc.graph import Graph
from byoc.inputs import made_at_random, random_inputs
from byoc.pipeline import ModelLike
from byoc.plan import FALLBACK
from byoc.plugins import Registry
from byoc.progress import ProgressFn
from byoc.tolerance import OutputReport, compare_arrays, float32_outputs, within_spread


@dataclass
class CompareReport:
    """Per-output errors of byoc against onnxruntime; ``passed`` when every output is close."""

    outputs: list[OutputReport]
    rtol: float
    atol: float
    plan: Any = field(default=None, repr=False)
    hint: str = ""  # on a mismatch: what may explain it besides byoc (``_int8_hint``)

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    def ran(self) -> dict[str, int]:
        """How many of the model's nodes each backend ran (onnxruntime: the rest)."""
        counts: dict[str, int] = {}
        for d in self.plan.decisions.values() if self.plan is not None else ():
            if not d.constant:  # constants are folded into the units that read them
                counts[d.backend] = counts.get(d.backend, 0) + 1
        return counts

    def backends_ran(self) -> bool:
        """Whether any backend (not onnxruntime) ran part of the model."""
        return any(b != FALLBACK for b in self.ran())

    def ran_line(self) -> str:
        """``ran: dnnl 566 nodes in 1 partition(s), onnxruntime 0``; or that no backend ran."""
        counts = self.ran()
        if not self.backends_ran():
            return (
                "ran: onnxruntime only; no backend ran, so this compared onnxruntime with "
                "itself (`byoc explain` says why)"
            )
        parts = self.plan.partitions if self.plan is not None else []
        shown = [
            f"{b} {n} nodes in {sum(p.backend == b for p in parts)} partition(s)"
            for b, n in counts.items()
            if b != FALLBACK
        ]
        return f"ran: {', '.join(shown)}; onnxruntime {counts.get(FALLBACK, 0)} nodes"

    def partition_notes(self) -> list[tuple[str, str]]:
        """``(partition, note)`` of each partition placement noted a precision for (bf16, or
        its backend's own int8 arithmetic): its error against onnxruntime's on the measurement
        inputs and the ``[compile] precision_tolerance`` it was held to, or why it was not."""
        placement = getattr(self.plan, "placement", None)
        if placement is None:
            return []
        found = [(p, placement.of(p)) for p in self.plan.partitions]
        return [(p.name, m.precision_note) for p, m in found if m is not None and m.precision_note]

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "ran": self.ran(),
            "partition_notes": dict(self.partition_notes()),
            "rtol": self.rtol,
            "atol": self.atol,
            "hint": self.hint,
            "outputs": [
                {
                    "name": o.name,
                    "shape": list(o.shape),
                    "max_abs_error": o.max_abs,
                    "max_rel_error": o.max_rel,
                    "passed": o.passed,
                    "note": o.note,
                    "onnxruntime_spread": o.spread,
                    "quantum": o.quantum,
                    "resolution": o.resolution,
                }
                for o in self.outputs
            ],
        }

    def table(self) -> str:
        rows = [("output", "shape", "max abs err", "max rel err", "result")]
        for o in self.outputs:
            rows.append(
                (
                    o.name,
                    "x".join(map(str, o.shape)) or "scalar",
                    f"{o.max_abs:.3g}",
                    f"{o.max_rel:.3g}",
                    ("ok" if o.passed else "MISMATCH")
                    + (f" ({o.note})" if o.note else "")
                    + (", allowed for rounding" if o.passed and o.spread is not None else ""),
                )
            )
        spread = [o for o in self.outputs if o.spread is not None]
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        ]
        verdict = "PASS" if self.passed else "FAIL"
        lines.append(
            f"{verdict}: |byoc - onnxruntime| <= {self.atol:g} + {self.rtol:g} * |onnxruntime|"
            + (" + twice onnxruntime's own spread" if spread else "")
            + (" + rounding ties" if any(o.quantum for o in spread) else "")
        )
        if any(o.resolution > self.rtol for o in self.outputs):
            lines[-1] += " (rtol at least one ulp of a float16 or bfloat16 output)"
        for o in spread:
            step = f"; rounding ties may move it {o.quantum:.3g}, allowed" if o.quantum else ""
            lines.append(
                f"  {o.name}: onnxruntime's own runs differ by {o.spread:.3g}{step} "
                "(optimized against unoptimized: fused kernels and sums in another order "
                "round otherwise, a quantized model's do; a float16 model against float32)"
            )
        if self.hint and not self.passed:
            lines.append(f"note: {self.hint}")
        lines.append(self.ran_line())
        notes = self.partition_notes()
        if notes:
            lines.append("placement's check of each partition ([compile] precision_tolerance):")
            lines.extend(f"  {name}: {note}" for name, note in notes)
            if not self.passed:
                lines.append(
                    "  (held to that tolerance, not to [compare]'s: set [compare] rtol/atol "
                    "to your accuracy budget)"
                )
        return "\n".join(lines)


def with_reference(
    model: ModelLike,
    config: ConfigLike,
    inputs: Mapping[str, np.ndarray] | None,
    progress: ProgressFn | None = None,
    options: ort.SessionOptions | None = None,
    registry: Registry | None = None,
) -> tuple[Config, CompiledModel, dict[str, np.ndarray], ort.InferenceSession]:
    """Compile ``model`` and open plain onnxruntime on the model as read (the reference).

    Inputs not given are random (``[shapes]``, ``[compare] seed`` and ``inputs``; their
    symbolic dims as the given inputs have them).
    """
    cfg = load_config(config)
    compiled = compile(model, cfg, inputs=inputs, progress=progress, registry=registry)
    plan = compiled.plan
    signature = Graph(plan.model) if plan is not None else compiled.inputs
    ranges = compiled.input_ranges if plan is None else None  # else the graph's own
    seed, fixed = cfg.compare["seed"], cfg.compare["inputs"]
    inputs = random_inputs(signature, cfg.shapes, seed, fixed, ranges, given=inputs)
    if plan is None:  # too large to partition: onnxruntime runs the file (compiler._whole_file)
        assert compiled.file is not None
        if options is None:  # the same session: a second holds the weights again
            return cfg, compiled, dict(inputs), compiled.steps[0].runtime.session
        source: Any = compiled.file
    else:
        source = (plan.source if plan.source is not None else plan.model).SerializeToString()
    try:
        reference = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime refuses what the ONNX checker let through
        raise ModelError(f"onnxruntime (the reference) cannot load the model: {exc}") from None
    return cfg, compiled, dict(inputs), reference


def compare(
    model: ModelLike,
    config: ConfigLike = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    progress: ProgressFn | None = None,
    registry: Registry | None = None,
) -> CompareReport:
    """Compile ``model`` with byoc, run it and plain onnxruntime on the same inputs, compare.

    ``progress`` and ``registry`` are passed to ``byoc.compile``.
    """
    given = set(inputs or {})
    cfg, compiled, inputs, reference = with_reference(
        model, config, inputs, progress, registry=registry
    )
    try:  # first: a model that fails on these inputs is not a backend's failure
        results = reference.run(compiled.outputs, dict(inputs))
    except Exception as exc:
        try:  # inputs that do not fit the model: byoc's own words, whatever the placement
            compiled.run(inputs)
        except InputError:
            raise
        except Exception:
            pass
        advice = made_at_random(inputs, given, cfg.compare["inputs"])
        raise ModelError(
            f"onnxruntime (the reference) failed on these inputs: {exc}{advice}"
        ) from None
    got = compiled.run(inputs)
    want = dict(zip(compiled.outputs, results, strict=True))
    rtol = cfg.compare["rtol"] if rtol is None else rtol
    atol = cfg.compare["atol"] if atol is None else atol
    reports = [compare_arrays(n, got[n], want[n], rtol, atol) for n in compiled.outputs]
    plan = compiled.plan
    passed = all(r.passed for r in reports)
    if plan is None:  # onnxruntime ran the whole file: nothing of byoc's to judge
        return CompareReport(reports, rtol, atol)
    others = [] if passed else _references(plan, inputs, compiled.outputs)
    if others:  # as measured placement judges a partition
        graph = Graph(plan.model)
        reports = [
            r
            if r.passed
            else within_spread(
                n, got[n], want[n], [o[n] for o in others], rtol, atol, graph.quantum(n)
            )
            for n, r in zip(compiled.outputs, reports, strict=True)
        ]
    passed = all(r.passed for r in reports)
    return CompareReport(reports, rtol, atol, plan, "" if passed else _int8_hint(plan.model))


# op type -> the input that holds the weights of its uint8 x int8 products
_INT8_PRODUCTS = {"MatMulInteger": 1, "ConvInteger": 1, "QLinearConv": 3, "QLinearMatMul": 3}
_INT8_PRODUCTS |= {"DequantizeLinear": 0}  # QDQ weights: onnxruntime fuses them into QLinearConv


def _int8_hint(model: Any) -> str:
    """Why onnxruntime itself may be off on ``model`` on this CPU, or "": its uint8 x int8
    products (``_INT8_PRODUCTS`` with int8 weights) saturate on an x86 CPU without VNNI. Weights
    known to lie in [-64, 64] (``reduce_range=True`` quantizes to 7 bits) cannot: a pair of
    products is at most 2 * 255 * 64 = 32640, inside int16."""
    if not host.cpu().saturates_int8():
        return ""
    graph, found = Graph(model), set()
    for n in model.graph.node:
        i = _INT8_PRODUCTS.get(n.op_type)
        weights = graph.type_of(n.input[i]) if i is not None and len(n.input) > i else None
        if weights is None or weights.dtype != np.int8:
            continue
        values = graph.constant(n.input[i])
        if values is None or values.size == 0 or np.abs(values.astype(np.int16)).max() > 64:
            found.add(n.op_type)
    if not found:
        return ""
    return (
        "this CPU has no VNNI, and onnxruntime's products of uint8 values and int8 weights "
        f"(read by {', '.join(sorted(found))} here) add pairs in int16 and saturate: where a "
        "backend computes them exactly, onnxruntime is the one off (docs/user-guide.md, "
        "quantized models; quantizing with reduce_range=True avoids it)"
    )


def _references(
    plan: Any, inputs: Mapping[str, np.ndarray], names: list[str]
) -> list[dict[str, Any]]:
    """onnxruntime's other runs of the model, which its spread is measured against: with its
    graph optimizations off, and a float16 or bfloat16 model in float32; those that run (none
    run: the strict comparison stands)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = plan.source if plan.source is not None else plan.model
    runs = []
    try:
        session = ort.InferenceSession(
            source.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        runs.append(session.run(names, dict(inputs)))
    except Exception:  # onnxruntime's own failure
        pass
    runs += [float32_outputs(source, inputs, names, rounded) for rounded in (False, True)]
    return [dict(zip(names, r, strict=True)) for r in runs if r is not None]
