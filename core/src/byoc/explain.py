"""``byoc explain``: for every node, who claimed it, or why each backend refused it.

The reasons come from the passes (``Plan.decisions``): support checks and allow-lists
(AnnotateTarget), pattern checks (MergeComposite), merges a cycle prevented
(MergeCompilerRegions), pruning of too-small partitions, and backends that sit out.
"""

from __future__ import annotations

import difflib
import textwrap
from collections import Counter
from typing import Any

from byoc.errors import ByocError
from byoc.graph import Graph
from byoc.plan import FALLBACK, Decision, Plan

ANY = "*"  # a refusal that holds for every backend (constants, subgraphs, foreign domains)


def node_reasons(decision: Decision, backend: str | None = None) -> list[tuple[str, str]]:
    """A node's (backend, reason) notes, only ``backend``'s (and the general ones) if given."""
    return [(b, r) for b, r in decision.refusals if backend in (None, b, ANY)]


def explain_json(plan: Plan, backend: str | None = None) -> dict[str, Any]:
    """The explanation as data: one entry per node, in the model's order."""
    graph = Graph(plan.model)
    nodes = []
    for name, d in plan.decisions.items():
        nodes.append(
            {
                "name": name,
                "op_type": graph.nodes[graph.index[name]].op_type,
                "constant": graph.index[name] in graph.const_nodes,
                "unit": d.owner,
                "backend": d.backend,
                "composite": d.composite,
                "reasons": [{"backend": b, "reason": r} for b, r in node_reasons(d, backend)],
            }
        )
    out = {"partitions": plan.to_json()["partitions"], "nodes": nodes}
    if plan.placement is not None:
        out["placement"] = plan.placement.to_json()
    return out


def explain_text(plan: Plan, backend: str | None = None) -> str:
    """The explanation as text: each partition with its nodes (and composites, and merges a
    cycle prevented), then the fallback nodes grouped by op type and reasons."""
    graph = Graph(plan.model)
    op = {n.name: n.op_type for n in graph.nodes}
    const = {graph.nodes[i].name for i in graph.const_nodes}
    lines: list[str] = []
    shown = [p for p in plan.partitions if backend in (None, p.backend)]
    for part in shown:
        work = [n for n in part.nodes if n not in const]
        lines.append(
            f"{part.name} ({part.backend}): {len(work)} node(s)" + _extra(part.nodes, work)
        )
        measured = plan.placement.of(part) if plan.placement else None
        if measured is not None:
            lines.append(f"    measured: {measured.summary()}")
        in_composite = {n for c in part.composites for n in c.nodes}
        singles = [f"{n} ({op[n]})" for n in work if n not in in_composite]
        if singles:
            lines.extend(_wrap(", ".join(singles), "    "))
        for comp in part.composites:
            lines.extend(_wrap(f"{comp.name}: {', '.join(comp.nodes)}", "    composite "))
        for n in work:
            for b, reason in plan.decisions[n].refusals:
                if b == part.backend and reason.startswith("kept out of"):
                    lines.extend(_wrap(f"{n}: {reason}", "    note: ", "        "))
        searched = {
            (b, reason)
            for n in work
            for b, reason in plan.decisions[n].refusals
            if b != part.backend and reason.startswith("search:")
        }
        for b, reason in sorted(searched):  # the candidates it beat, and by how much
            lines.extend(_wrap(f"{b}: {reason}", "    beat ", "        "))
        lines.append("")
    fallback = [n for n in plan.fallback_nodes if n not in const]
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[str]] = {}
    for n in fallback:
        key = (op[n], tuple(node_reasons(plan.decisions[n], backend)))
        groups.setdefault(key, []).append(n)
    lines.append(f"{FALLBACK}: {len(fallback)} node(s) no backend claimed")
    for (op_type, reasons), names in groups.items():
        lines.extend(_wrap(f"{op_type} x{len(names)}: {', '.join(names)}", "  ", "      "))
        if not reasons:
            lines.append("      no backend is enabled to claim it")
        for b, reason in reasons:
            who = "every backend" if b == ANY else b
            lines.extend(_wrap(f"{who}: {reason}", "      - ", "        "))
    total = len(plan.decisions) - len(const)
    lines.append("")
    summary = (
        f"{len(plan.partitions)} partition(s); {total - len(fallback)} of {total} nodes claimed"
    )
    if const:
        summary += f"; {len(const)} constant node(s), bound inside the units that read them"
    lines.extend(_wrap(summary, ""))
    lines.extend(plan.placement_lines())
    return "\n".join(lines)


SUMMARY_ROWS = 25  # op types explain_summary shows: the most frequent


def explain_summary(plan: Plan, backend: str | None = None) -> str:
    """A table per op type (the most frequent ``SUMMARY_ROWS``): how many nodes, which backend
    took how many, and why the others stayed on onnxruntime (the most common reason); then the
    totals and placement's main verdicts. ``explain_text`` lists every node."""
    graph = Graph(plan.model)
    op = {n.name: n.op_type for n in graph.nodes}
    const = {graph.nodes[i].name for i in graph.const_nodes}
    counts: Counter[str] = Counter()
    taken: dict[str, Counter[str]] = {}
    why: dict[str, Counter[str]] = {}
    for name, d in plan.decisions.items():
        if name in const:
            continue
        t = op[name]
        counts[t] += 1
        taken.setdefault(t, Counter())[d.backend] += 1
        if d.backend == FALLBACK:
            reasons = node_reasons(d, backend)
            b, reason = reasons[0] if reasons else (ANY, "no backend is enabled to claim it")
            who = "" if b == ANY else f"{b}: "
            why.setdefault(t, Counter())[who + reason] += 1
    rows = [("op type", "nodes", "taken by", "left on onnxruntime because (most often)")]
    for t, n in counts.most_common(SUMMARY_ROWS):
        by = ", ".join(f"{b} {k}" for b, k in taken[t].most_common())
        reason = why[t].most_common(1)[0][0] if t in why else ""
        rows.append((t, str(n), by, _clip(reason, 70)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if len(counts) > SUMMARY_ROWS:
        lines.append(f"... {len(counts) - SUMMARY_ROWS} rarer op type(s)")
    total = sum(counts.values())
    fallback = sum(taken[t][FALLBACK] for t in taken)
    lines.append(
        f"{len(plan.partitions)} partition(s); {total - fallback} of {total} nodes claimed"
        + (f"; {len(const)} constant node(s)" if const else "")
    )
    lines.extend(plan.placement_lines(verbose=False))
    lines.append("(-v lists every node and every verdict; --node NAME shows one node)")
    return "\n".join(lines)


def explain_node(plan: Plan, name: str, backend: str | None = None) -> str:
    """One node: its op type, the unit that runs it, and every backend's reason."""
    if name not in plan.decisions:
        close = difflib.get_close_matches(name, list(plan.decisions), n=5, cutoff=0.5)
        hint = f"; near names: {', '.join(close)}" if close else ""
        raise ByocError(f"--node: the model has no node named '{name}'{hint}")
    graph = Graph(plan.model)
    d = plan.decisions[name]
    lines = [f"{name} ({graph.nodes[graph.index[name]].op_type}): {d.owner} ({d.backend})"]
    if d.composite:
        lines.append(f"  in composite {d.composite}")
    if d.constant:
        lines.append("  a constant: folded, bound inside the units that read it")
    for b, reason in node_reasons(d, backend):
        who = "every backend" if b == ANY else b
        lines.extend(_wrap(f"{who}: {reason}", "  - ", "    "))
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _extra(nodes: list[str], work: list[str]) -> str:
    n = len(nodes) - len(work)
    return f" + {n} constant(s)" if n else ""


def _wrap(text: str, first: str, rest: str | None = None) -> list[str]:
    return textwrap.wrap(
        text,
        width=100,
        initial_indent=first,
        subsequent_indent=rest if rest is not None else " " * len(first),
        break_on_hyphens=False,
    )
