"""The partition plan: what each backend gets, and what stays on onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import onnx

from byoc.config import Config
from byoc.graph import Graph, NodeView, tensor_type

FALLBACK = "onnxruntime"


@dataclass(frozen=True)
class Composite:
    """Nodes that MergeComposite grouped into one kernel, e.g. ``dnnl.conv2d_bias_relu``."""

    name: str
    nodes: tuple[str, ...]  # member node names in topological order; the root is last
    # the values the pattern named (``wildcard("x")``, ``const("bias")``, ``p.named(...)``)
    bound: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass
class Partition:
    """One unit of the compiled model: a backend partition or a fallback segment.

    ``model`` is a standalone ONNX model of the partition: its graph inputs and outputs are
    ``inputs`` and ``outputs`` (in that order), every constant it reads is an initializer, and
    it keeps the source model's IR version, opsets and functions, so onnxruntime can run it too.
    """

    name: str  # the symbol: <backend>_<index>
    backend: str
    nodes: list[str]
    inputs: list[str]
    outputs: list[str]
    model: onnx.ModelProto
    composites: list[Composite] = field(default_factory=list)
    # backend options for this partition alone, over the backend's table: the reduced
    # precision placement chose for it ({"fpmath": "bf16"}), carried into a .byoc file
    options: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def graph(self) -> Graph:
        """Analysis of ``model``: types, constants, node views."""
        return Graph(self.model)

    def steps(self) -> list[NodeView | tuple[Composite, list[NodeView]]]:
        """The work in topological order: single nodes, and composites with their members."""
        graph = self.graph
        owner = {name: c for c in self.composites for name in c.nodes}
        out: list[NodeView | tuple[Composite, list[NodeView]]] = []
        for i, node in enumerate(graph.nodes):
            if i in graph.const_nodes:
                continue
            comp = owner.get(node.name)
            if comp is None:
                out.append(graph.view(i))
            elif node.name == comp.nodes[-1]:
                out.append((comp, [graph.view(graph.index[n]) for n in comp.nodes]))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "backend": self.backend,
            "nodes": list(self.nodes),
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
        }


TABLE_ROWS = 20  # units ``Plan.table`` shows unless verbose: the largest
PLACEMENT_LINES = 12  # verdicts it shows unless verbose: those that save or cost the most


@dataclass
class Decision:
    """Why a node ended where it did, for ``byoc explain``."""

    owner: str  # partition name, or "onnxruntime"
    backend: str  # backend name, or "onnxruntime"
    composite: str | None = None
    refusals: list[tuple[str, str]] = field(default_factory=list)  # (backend, reason)
    constant: bool = False  # a constant node: folded, bound inside the units that read it


@dataclass
class Measurement:
    """A backend partition (or, with backend "byoc", the whole compiled model) timed against
    onnxruntime running the same thing, on the same inputs, in the same process."""

    partition: str  # the name it had when it was measured
    backend: str
    nodes: list[str]
    backend_ms: float
    onnxruntime_ms: float
    kept: bool
    cached: bool = False  # read from the measurement cache, not timed in this compile
    call_ms: float = 0.0  # what one onnxruntime session call costs whatever it runs
    # ~95% interval of the median backend/onnxruntime ratio (pairs of runs; the whole model:
    # rounds of blocks) and how many samples timing took to make it clear of the threshold
    interval: tuple[float, float] | None = None
    samples: int = 0
    clear: bool = True  # False: the time budget ran out with the interval across the threshold
    measured_at: float = 0.0  # time.time() when timed: an unclear verdict is timed again later
    failure: str | None = None  # why it was not timed: it failed or differed from onnxruntime
    margin: float = 0.0  # the [compile] margin it was judged with
    precision: str = "fp32"  # what it computes in ([compile] precision)
    precision_note: str = ""  # its reduced-precision error, or why it stayed fp32
    others: float | None = None  # the share of the CPUs other processes took while it was timed
    disturbed: bool = False  # they took too much for the timing to say anything (not cached)
    clock: str = "wall"  # "cpu": timed on one thread in CPU time, as they disturbed wall time

    def needed_ms(self) -> float:
        """The most the backend may take to be kept: onnxruntime's time less the session call
        a returned partition saves, less the margin."""
        return (self.onnxruntime_ms - self.call_ms) * (1 - self.margin)

    def threshold(self, margin: bool = True) -> float:
        """``needed_ms`` as a ratio of onnxruntime's time (with or without the margin)."""
        if self.onnxruntime_ms <= 0:
            return 0.0
        needed = self.needed_ms() if margin else self.onnxruntime_ms - self.call_ms
        return needed / self.onnxruntime_ms

    def spread(self) -> str:
        """``, ratio in [0.80, 0.86] over 12 pairs``: the interval of the median ratio
        (``, unclear`` when it stayed across the threshold), or nothing without one."""
        if self.interval is None:
            return ""
        lo, hi = self.interval
        unit = "rounds" if self.backend == "byoc" else "pairs"
        text = f", ratio in [{lo:.3g}, {hi:.3g}] over {self.samples} {unit}"
        return text + ("" if self.clear else ", unclear")

    def summary(self) -> str:
        """``kept: 1.2 ms on dnnl vs 1.5 ms on onnxruntime (kept at <= 1.46 ms: ...)``, every
        term of the decision; or why it was returned untimed."""
        if self.failure is not None:
            return f"returned to onnxruntime: {self.failure}"
        if self.disturbed:
            return f"returned to onnxruntime: {self.busy()}"
        verdict = "kept" if self.kept else "returned to onnxruntime"
        call = f" less its {self.call_ms:.2g} ms session call," if self.call_ms else ""
        terms = (
            f"kept at <= {self.needed_ms():.3g} ms: onnxruntime's time{call} less the "
            f"{self.margin:.0%} margin"
        )
        note = f"; {self.precision_note}" if self.precision_note else ""
        note += f"; {self.on_one_thread()}" if self.clock == "cpu" else ""
        return (
            f"{verdict}: {self.backend_ms:.3g} ms on {self.backend} vs "
            f"{self.onnxruntime_ms:.3g} ms on onnxruntime ({terms}{self.spread()}){note}"
            + (" (cached)" if self.cached else "")
        )

    def on_one_thread(self) -> str:
        """How a timing in CPU time came about (``clock == "cpu"``)."""
        return (
            f"timed on one thread in CPU time: other processes took {self.others or 0:.0%} of "
            "the CPUs"
        )

    def busy(self) -> str:
        """Why a disturbed timing says nothing, with what it read."""
        return (
            f"other processes took {self.others or 0:.0%} of the CPUs while it was timed, so its "
            f"{self.backend_ms:.3g} ms against {self.onnxruntime_ms:.3g} ms on onnxruntime is "
            "no evidence (not cached: the next compile times it again)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "backend": self.backend,
            "nodes": len(self.nodes),
            "backend_ms": self.backend_ms,
            "onnxruntime_ms": self.onnxruntime_ms,
            "call_ms": self.call_ms,
            "interval": list(self.interval) if self.interval is not None else None,
            "samples": self.samples,
            "clear": self.clear,
            "verdict": "kept" if self.kept else "returned",
            "cached": self.cached,
            "failure": self.failure,
            "precision": self.precision,
            "precision_note": self.precision_note,
            "others": self.others,
            "disturbed": self.disturbed,
            "clock": self.clock,
        }


@dataclass
class Placement:
    """How measured placement decided (``[compile] placement``)."""

    mode: str  # "measured" or "static"
    measurements: list[Measurement] = field(default_factory=list)  # every partition tried
    whole: Measurement | None = None  # the compiled model against plain onnxruntime
    note: str = ""  # why nothing was measured, when that is so

    def of(self, partition: Partition) -> Measurement | None:
        """The measurement of a partition of the final plan (same backend and nodes; of those,
        the one named as it is, since a partition measured in another round of partitioning
        may have held the same nodes: ``placer.named``)."""
        same = [
            m
            for m in self.measurements
            if m.backend == partition.backend and m.nodes == partition.nodes
        ]
        return next((m for m in same if m.partition == partition.name), same[0] if same else None)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "measurements": [m.to_json() for m in self.measurements],
            "whole_model": self.whole.to_json() if self.whole else None,
            "note": self.note,
        }


@dataclass
class Plan:
    """The result of partitioning: backend partitions, fallback segments, the run order."""

    model: onnx.ModelProto  # the normalized source model
    partitions: list[Partition]  # backend partitions, in run order
    segments: list[Partition]  # onnxruntime segments, in run order
    schedule: list[Partition]  # every unit, in a topological run order
    fallback_nodes: list[str]
    decisions: dict[str, Decision]
    config: Config | None = None
    source: onnx.ModelProto | None = None  # the model as read: declared input types, no [shapes]
    placement: Placement | None = None  # set by byoc.compile: what measured placement found
    # the analysis of ``model`` the plan was made from: partitioning the plan again reuses it,
    # and what backends learnt of it (OpenVINO's query, onnxruntime's fusions); a compiled
    # model's plan drops it
    graph: Graph | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The plan as in DESIGN.md: ``partitions`` and ``fallback_nodes``; after measured
        placement each partition has ``measured`` and the plan has ``placement``."""
        parts = []
        for p in self.partitions:
            entry = p.to_json()
            m = self.placement.of(p) if self.placement else None
            if m is not None:
                entry["measured"] = m.to_json()
            parts.append(entry)
        out: dict[str, Any] = {"partitions": parts, "fallback_nodes": list(self.fallback_nodes)}
        if self.placement is not None:
            out["placement"] = self.placement.to_json()
        return out

    def work(self, nodes: list[str]) -> int:
        """How many of ``nodes`` compute (constant nodes, folded into their readers, apart),
        the count ``partition``, ``explain`` and ``compare`` all show."""
        return sum(1 for n in nodes if not (n in self.decisions and self.decisions[n].constant))

    def table(self, verbose: bool = False) -> str:
        """A readable table of the plan, one row per partition and fallback segment (the
        largest ``TABLE_ROWS`` unless ``verbose``), a line per backend, and placement's
        verdicts (``PLACEMENT_LINES`` of them unless ``verbose``)."""
        rows = [("unit", "backend", "nodes", "ops", "inputs", "outputs")]
        units = self.schedule
        if not verbose and len(units) > TABLE_ROWS:
            largest = {id(u) for u in sorted(units, key=lambda u: -self.work(u.nodes))[:TABLE_ROWS]}
            units = [u for u in units if id(u) in largest]
        for unit in units:
            ops: dict[str, int] = {}
            composites = {c.nodes[-1]: c.name for c in unit.composites}
            members = {n for c in unit.composites for n in c.nodes}
            index = {n.name: n for n in unit.model.graph.node}
            for name in unit.nodes:
                if name in composites:
                    key = composites[name]
                elif name in members or name not in index:
                    continue
                else:
                    key = index[name].op_type
                ops[key] = ops.get(key, 0) + 1
            summary = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in ops.items())
            rows.append(
                (
                    unit.name,
                    unit.backend,
                    str(self.work(unit.nodes)),
                    _clip(summary, 60),
                    _clip(", ".join(unit.inputs), 30),
                    _clip(", ".join(unit.outputs), 30),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        if len(units) < len(self.schedule):
            lines.append(
                f"... {len(self.schedule) - len(units)} smaller unit(s) not shown (-v shows all)"
            )
        work = {n for n, d in self.decisions.items() if not d.constant}
        n_nodes = len(work)
        claimed = n_nodes - len(work.intersection(self.fallback_nodes))
        lines.extend(self.backend_lines())
        lines.append(
            f"{len(self.partitions)} partition(s), {len(self.segments)} onnxruntime segment(s); "
            f"{claimed} of {n_nodes} nodes claimed by backends"
            + (
                f"; {constants} constant node(s)"
                if (constants := len(self.decisions) - n_nodes)
                else ""
            )
        )
        if not claimed and n_nodes:
            lines.extend(self._symbolic_hint())
        lines.extend(self.placement_lines(verbose))
        return "\n".join(lines)

    def backend_lines(self) -> list[str]:
        """One line per backend that holds units: how many, and their nodes (constants apart,
        counted as ``table`` and ``byoc bench`` count them)."""
        by: dict[str, list[Partition]] = {}
        for unit in self.schedule:
            by.setdefault(unit.backend, []).append(unit)
        lines = []
        for backend, units in by.items():
            nodes = sum(self.work(u.nodes) for u in units)
            consts = sum(len(u.nodes) for u in units) - nodes
            kind = "segment(s)" if backend == FALLBACK else "partition(s)"
            lines.append(
                f"  {backend}: {len(units)} {kind}, {nodes} node(s)"
                + (f" + {consts} constant(s)" if consts else "")
            )
        return lines

    def _symbolic_hint(self) -> list[str]:
        """Why nothing may have been claimed: inputs left with symbolic dims."""
        types = {v.name: tensor_type(v.type) for v in self.model.graph.input}
        loose = [
            f"{name} {[d if isinstance(d, int) else (d or '?') for d in t.shape]}"
            for name, t in types.items()
            if t is not None and t.shape is not None and not t.is_static
        ]
        if not loose:
            return []
        return [
            f"(inputs with symbolic dims: {_clip('; '.join(loose), 120)}: backends that need "
            "static shapes claim nothing there; fix them in the config's [shapes], or run the "
            "model through byoc.InferenceSession, which compiles the shapes an app calls with)"
        ]

    def placement_lines(self, verbose: bool = True) -> list[str]:
        """What measured placement decided, one line per measured partition (the
        ``PLACEMENT_LINES`` that save or cost the most unless ``verbose``), then the whole
        model's verdict (empty without measured placement)."""
        p = self.placement
        if p is None:
            return []
        if p.note:
            return [f"placement: {p.note}"]
        lines = [f"placement ({p.mode}):"] if p.measurements or p.whole else []
        shown = p.measurements
        if not verbose and len(shown) > PLACEMENT_LINES:
            weight = sorted(shown, key=lambda m: -abs(m.onnxruntime_ms - m.backend_ms))
            top = {id(m) for m in weight[:PLACEMENT_LINES]}
            shown = [m for m in shown if id(m) in top]
        for m in shown:
            work = self.work(m.nodes)
            lines.append(f"  {m.partition} ({work} node{'' if work == 1 else 's'}): {m.summary()}")
        if len(shown) < len(p.measurements):
            lines.append(
                f"  ... {len(p.measurements) - len(shown)} more verdict(s) on smaller time "
                "differences (-v, or `byoc explain -v`, shows every one)"
            )
        if p.whole is not None:
            verdict = "byoc kept" if p.whole.kept else "runs as plain onnxruntime"
            if p.whole.disturbed:
                verdict += f" (other processes took {p.whole.others or 0:.0%} of the CPUs)"
            elif p.whole.clock == "cpu":
                verdict += f" ({p.whole.on_one_thread()})"
            lines.append(
                f"  whole model: {p.whole.backend_ms:.3g} ms compiled vs "
                f"{p.whole.onnxruntime_ms:.3g} ms plain onnxruntime{p.whole.spread()}: {verdict}"
                + (" (cached)" if p.whole.cached else "")
            )
        return lines


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
