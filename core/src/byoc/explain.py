"""``byoc explain``: for every node, who claimed it, or why each backend refused it.

The reasons come from the passes (``Plan.decisions``): support checks and allow-lists
(AnnotateTarget), pattern checks (MergeComposite), merges a cycle prevented
(MergeCompilerRegions), pruning of too-small partitions, and backends that sit out.
"""

from __future__ import annotations

import textwrap
from typing import Any

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
