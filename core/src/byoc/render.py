"""A picture of a plan: Graphviz source, and SVG (through ``dot`` when installed, else drawn here).

Each backend partition is a box (a Graphviz cluster, an SVG ``<g id="<partition>">``) coloured
by its backend; fallback nodes are grey and unboxed; graph inputs and outputs are ellipses.
Constants are left out. To keep large graphs readable, chains of three or more nodes inside one
unit become one box ("N ops: Conv, Relu, ..."), composites are one box, and when the picture
would still have more than ``max_boxes`` boxes every unit becomes one box.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from byoc.graph import Graph
from byoc.plan import FALLBACK, Partition, Plan

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")
GREY, GREY_EDGE = "#e0e0e0", "#9e9e9e"
MIN_CHAIN = 3
MAX_BOXES = 80


@dataclass
class Box:
    """One drawn box: a node, a composite, a chain, a whole unit, or a graph input/output."""

    id: str
    label: list[str]
    unit: Partition | None  # None for graph inputs and outputs
    nodes: list[str] = field(default_factory=list)
    kind: str = "node"  # node, composite, chain, unit, input, output


@dataclass
class Picture:
    """What is drawn: boxes in topological order, edges between them, backend colours."""

    boxes: list[Box]
    edges: list[tuple[int, int]]
    colours: dict[str, str]
    title: str


def colours(plan: Plan) -> dict[str, str]:
    """One palette colour per backend with partitions, in name order."""
    names = sorted({p.backend for p in plan.partitions})
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def picture(plan: Plan, max_boxes: int = MAX_BOXES) -> Picture:
    """Group a plan's nodes into boxes (composites, chains, or whole units) with their edges."""
    pic = _group(plan, collapse_units=False)
    if sum(b.unit is not None for b in pic.boxes) > max_boxes:
        pic = _group(plan, collapse_units=True)
    return pic


def _group(plan: Plan, collapse_units: bool) -> Picture:
    graph = Graph(plan.model)
    unit_of = {name: u for u in plan.schedule for name in u.nodes}
    work = [i for i in range(len(graph.nodes)) if i not in graph.const_nodes]
    # start: one group per composite, per unit (when collapsing units), else per node
    key: dict[int, object] = {}
    for i in work:
        name = graph.nodes[i].name
        unit = unit_of[name]
        comp = next((c for c in unit.composites if name in c.nodes), None)
        key[i] = unit.name if collapse_units else (comp.name, comp.nodes) if comp else i
    groups: dict[object, list[int]] = {}
    for i in work:
        groups.setdefault(key[i], []).append(i)
    members = list(groups.values())
    group_of = {i: g for g, nodes in enumerate(members) for i in nodes}
    edges = _edges(graph, work, group_of)
    if not collapse_units:
        members, group_of, edges = _chains(graph, members, edges, unit_of)
    boxes: list[Box] = []
    for g, nodes in enumerate(members):
        names = [graph.nodes[i].name for i in nodes]
        unit = unit_of[names[0]]
        ops = [graph.nodes[i].op_type for i in nodes]
        comp = next((c for c in unit.composites if c.nodes == tuple(names)), None)
        if collapse_units:
            kind, label = "unit", [_summary(ops), _span(names)]
        elif comp is not None:
            kind, label = "composite", [comp.name, names[-1]]
        elif len(nodes) == 1:
            kind, label = "node", [names[0], ops[0]]
        else:
            kind, label = "chain", [_summary(ops), _span(names)]
        boxes.append(Box(f"b{g}", label, unit, names, kind))
    # graph inputs and outputs
    n = len(boxes)
    box_edges = set(edges)
    for name in graph.inputs:
        users = {group_of[u] for u in graph.consumers.get(name, []) if u in group_of}
        if users:
            boxes.append(Box(f"in_{len(boxes)}", [name], None, kind="input"))
            box_edges.update((len(boxes) - 1, u) for u in users)
    for name in graph.outputs:
        if graph.producer.get(name) in group_of:
            boxes.append(Box(f"out_{len(boxes)}", [name], None, kind="output"))
            box_edges.add((group_of[graph.producer[name]], len(boxes) - 1))
    order = _toposort(len(boxes), box_edges, first=list(range(n, len(boxes))))
    remap = {old: new for new, old in enumerate(order)}
    boxes = [boxes[i] for i in order]
    edges = sorted((remap[a], remap[b]) for a, b in box_edges)
    n_fallback = len([x for x in plan.fallback_nodes if graph.index[x] not in graph.const_nodes])
    title = f"{len(plan.partitions)} partition(s), {n_fallback} of {len(work)} nodes on {FALLBACK}"
    return Picture(boxes, edges, colours(plan), title)


def _edges(graph: Graph, work: list[int], group_of: dict[int, int]) -> list[tuple[int, int]]:
    found = {
        (group_of[i], group_of[s])
        for i in work
        for s in graph.succ(i)
        if s in group_of and group_of[s] != group_of[i]
    }
    return sorted(found)


def _chains(
    graph: Graph,
    members: list[list[int]],
    edges: list[tuple[int, int]],
    unit_of: dict[str, Partition],
) -> tuple[list[list[int]], dict[int, int], list[tuple[int, int]]]:
    """Fuse runs a -> b -> c of one unit where each link is the only way out and in."""
    succ: dict[int, list[int]] = {}
    pred: dict[int, list[int]] = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        pred.setdefault(b, []).append(a)
    outputs = set(graph.outputs)

    def unit(g: int) -> str:
        return unit_of[graph.nodes[members[g][0]].name].name

    def single(g: int) -> bool:  # composites stay their own box
        return len(members[g]) == 1

    def link(a: int) -> int | None:
        nxt = succ.get(a, [])
        if len(nxt) != 1 or not single(a) or not single(nxt[0]):
            return None
        if len(pred.get(nxt[0], [])) != 1 or unit(a) != unit(nxt[0]):
            return None
        if any(v in outputs for v in graph.nodes[members[a][0]].output):
            return None
        return nxt[0]

    linked = {a: nxt for a in range(len(members)) if (nxt := link(a)) is not None}
    heads = [g for g in range(len(members)) if g not in set(linked.values())]
    fused: list[list[int]] = []
    for head in heads:
        run = [head]
        while run[-1] in linked:
            run.append(linked[run[-1]])
        if len(run) >= MIN_CHAIN:
            fused.append([i for g in run for i in members[g]])
        else:
            fused.extend(members[g] for g in run)
    fused.sort(key=lambda nodes: nodes[0])
    group_of = {i: g for g, nodes in enumerate(fused) for i in nodes}
    work = sorted(group_of)
    return fused, group_of, _edges(graph, work, group_of)


def _toposort(n: int, edges: set[tuple[int, int]], first: list[int]) -> list[int]:
    indegree = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for a, b in sorted(edges):
        succ[a].append(b)
        indegree[b] += 1
    ready = [i for i in first if indegree[i] == 0]
    ready += [i for i in range(n) if indegree[i] == 0 and i not in set(first)]
    order: list[int] = []
    while ready:
        i = ready.pop(0)
        order.append(i)
        for s in succ[i]:
            indegree[s] -= 1
            if indegree[s] == 0:
                ready.append(s)
    return order


def _summary(ops: list[str], most: int = 4) -> str:
    kinds = list(dict.fromkeys(ops))
    shown = ", ".join(kinds[:most]) + (", ..." if len(kinds) > most else "")
    return f"{len(ops)} op{'s' if len(ops) > 1 else ''}: {shown}"


def _span(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"


# -- Graphviz ---------------------------------------------------------------------------------


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(plan: Plan, max_boxes: int = MAX_BOXES) -> str:
    """Graphviz source of the plan: one ``cluster_<partition>`` per backend partition."""
    pic = picture(plan, max_boxes)
    lines = [
        "digraph plan {",
        f"  graph [fontname=Helvetica, fontsize=12, labelloc=t, label={_q(pic.title)}];",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10];',
        '  edge [color="#555555", arrowsize=0.6];',
    ]
    by_unit: dict[str, list[int]] = {}
    for i, box in enumerate(pic.boxes):
        if box.unit is not None and box.unit.backend != FALLBACK:
            by_unit.setdefault(box.unit.name, []).append(i)
    partitions = {p.name: p for p in plan.partitions}
    for name, indices in by_unit.items():
        colour = pic.colours[partitions[name].backend]
        lines.append(f"  subgraph {_q('cluster_' + name)} {{")
        lines.append(
            f"    id={_q(name)}; label={_q(f'{name} ({partitions[name].backend})')}; "
            f'style="rounded,filled"; color={_q(colour)}; fillcolor={_q(colour + "26")};'
        )
        lines.extend(f"    {_dot_node(pic.boxes[i], colour)}" for i in indices)
        lines.append("  }")
    for box in pic.boxes:
        if box.unit is None or box.unit.backend == FALLBACK:
            lines.append(f"  {_dot_node(box, None)}")
    lines.extend(f"  {pic.boxes[a].id} -> {pic.boxes[b].id};" for a, b in pic.edges)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_node(box: Box, colour: str | None) -> str:
    label = '"' + "\\n".join(_q(t)[1:-1] for t in box.label) + '"'
    if box.kind in ("input", "output"):
        return f"{box.id} [label={label}, shape=ellipse, style=solid];"
    if colour is None:
        return f"{box.id} [label={label}, fillcolor={_q(GREY)}, color={_q(GREY_EDGE)}];"
    return f"{box.id} [label={label}, fillcolor={_q(colour + '66')}, color={_q(colour)}];"


def to_svg(plan: Plan, max_boxes: int = MAX_BOXES, use_dot: bool | None = None) -> str:
    """SVG of the plan, laid out by Graphviz ``dot`` when it is on PATH (or ``use_dot``), else
    by a simple layered layout drawn here."""
    exe = shutil.which("dot")
    if use_dot is None:
        use_dot = exe is not None
    if use_dot and exe is not None:
        done = subprocess.run(
            [exe, "-Tsvg"],
            input=to_dot(plan, max_boxes),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode == 0:
            return done.stdout
    return layered_svg(picture(plan, max_boxes))


# -- the layered layout, no Graphviz needed ---------------------------------------------------

_CHAR, _LINE, _PAD, _GAP_X, _GAP_Y, _MARGIN = 6.6, 14, 8, 24, 44, 30


def layered_svg(pic: Picture) -> str:
    """Draw a picture top-down, one layer per topological depth, partitions boxed by backend."""
    n = len(pic.boxes)
    preds: list[list[int]] = [[] for _ in range(n)]
    for a, b in pic.edges:
        preds[b].append(a)
    layer = [0] * n
    for i in range(n):  # boxes are in topological order
        layer[i] = max((layer[p] + 1 for p in preds[i]), default=0)
    size = [
        (max(len(t) for t in b.label) * _CHAR + 2 * _PAD, len(b.label) * _LINE + 2 * _PAD)
        for b in pic.boxes
    ]
    rows: dict[int, list[int]] = {}
    for i in range(n):
        rows.setdefault(layer[i], []).append(i)
    x = [0.0] * n
    y = [0.0] * n
    top = _MARGIN + 40.0  # room for the title and legend
    for depth in sorted(rows):
        row = rows[depth]
        row.sort(key=lambda i: (_mean([x[p] for p in preds[i]]), i))
        height = max(size[i][1] for i in row)
        cursor = 0.0
        for i in row:
            x[i] = cursor + size[i][0] / 2
            cursor += size[i][0] + _GAP_X
        above = [x[p] - _MARGIN for i in row for p in preds[i]]
        shift = max(0.0, _mean(above) - (cursor - _GAP_X) / 2) if above else 0.0
        for i in row:
            x[i] += shift + _MARGIN
            y[i] = top + height / 2
        top += height + _GAP_Y
    width = max((x[i] + size[i][0] / 2 for i in range(n)), default=200) + _MARGIN + 60
    width = max(width, 420.0)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{top + _MARGIN:.0f}"'
        f' viewBox="0 0 {width:.0f} {top + _MARGIN:.0f}" font-family="Helvetica, Arial, sans-serif"'
        ' font-size="11">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6"'
        ' markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555555"/></marker>'
        "</defs>",
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{_MARGIN}" y="{_MARGIN}" font-size="13">{escape(pic.title)}</text>',
    ]
    out.extend(_legend(pic))
    units: dict[str, list[int]] = {}
    for i, box in enumerate(pic.boxes):
        if box.unit is not None and box.unit.backend != FALLBACK:
            units.setdefault(box.unit.name, []).append(i)
    for name, indices in units.items():
        backend = pic.boxes[indices[0]].unit.backend  # type: ignore[union-attr]
        colour = pic.colours[backend]
        x0 = min(x[i] - size[i][0] / 2 for i in indices) - 10
        x1 = max(x[i] + size[i][0] / 2 for i in indices) + 10
        y0 = min(y[i] - size[i][1] / 2 for i in indices) - 22
        y1 = max(y[i] + size[i][1] / 2 for i in indices) + 8
        label = f"{name} ({backend})"
        x1 = max(x1, x0 + len(label) * _CHAR + 12)
        out.append(
            f'<g id="{escape(name)}" class="cluster partition"><title>{escape(name)}</title>'
            f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" rx="6"'
            f' fill="{colour}" fill-opacity="0.15" stroke="{colour}"/>'
            f'<text x="{x0 + 6:.1f}" y="{y0 + 14:.1f}" fill="{colour}">'
            f"{escape(label)}</text></g>"
        )
    right = {d: max(x[i] + size[i][0] / 2 for i in row) for d, row in rows.items()}
    for a, b in pic.edges:
        x_a, y_a = x[a], y[a] + size[a][1] / 2
        x_b, y_b = x[b], y[b] - size[b][1] / 2
        mid = (y_a + y_b) / 2
        if layer[b] - layer[a] > 1:  # go round the layers in between, on the right
            side = max(right[d] for d in range(layer[a] + 1, layer[b])) + 30
            path = (
                f"M{x_a:.1f},{y_a:.1f} C{x_a:.1f},{y_a + 20:.1f} {side:.1f},{y_a:.1f} "
                f"{side:.1f},{y_a + 30:.1f} L{side:.1f},{y_b - 30:.1f} "
                f"C{side:.1f},{y_b:.1f} {x_b:.1f},{y_b - 20:.1f} {x_b:.1f},{y_b:.1f}"
            )
        else:
            path = (
                f"M{x_a:.1f},{y_a:.1f} C{x_a:.1f},{mid:.1f} {x_b:.1f},{mid:.1f} {x_b:.1f},{y_b:.1f}"
            )
        out.append(f'<path d="{path}" fill="none" stroke="#555555" marker-end="url(#arrow)"/>')
    for i, box in enumerate(pic.boxes):
        out.append(_svg_box(box, x[i], y[i], size[i], pic.colours))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _legend(pic: Picture) -> list[str]:
    items = [*pic.colours.items(), (f"{FALLBACK} (fallback)", GREY)]
    out, cursor = [], float(_MARGIN)
    for name, colour in items:
        out.append(
            f'<rect x="{cursor:.1f}" y="{_MARGIN + 12}" width="12" height="12" fill="{colour}"'
            f' stroke="{GREY_EDGE}"/><text x="{cursor + 16:.1f}" y="{_MARGIN + 22}">'
            f"{escape(name)}</text>"
        )
        cursor += 16 + len(name) * _CHAR + 16
    return out


def _svg_box(box: Box, cx: float, cy: float, size: tuple[float, float], pal: dict[str, str]) -> str:
    w, h = size
    if box.kind in ("input", "output"):
        shape = (
            f'<ellipse cx="{cx:.1f}" cy="{cy:.1f}" rx="{w / 2:.1f}" ry="{h / 2:.1f}" fill="white"'
            ' stroke="#555555"/>'
        )
    else:
        backend = box.unit.backend if box.unit is not None else FALLBACK
        fill, stroke, opacity = (
            (GREY, GREY_EDGE, 1.0) if backend == FALLBACK else (pal[backend], pal[backend], 0.4)
        )
        shape = (
            f'<rect x="{cx - w / 2:.1f}" y="{cy - h / 2:.1f}" width="{w:.1f}" height="{h:.1f}"'
            f' rx="4" fill="{fill}" fill-opacity="{opacity}" stroke="{stroke}"/>'
        )
    first = cy - (len(box.label) - 1) * _LINE / 2 + 4
    texts = "".join(
        f'<text x="{cx:.1f}" y="{first + k * _LINE:.1f}" text-anchor="middle">{escape(t)}</text>'
        for k, t in enumerate(box.label)
    )
    title = escape(", ".join(box.nodes) if box.nodes else box.label[0])
    return f'<g id="{box.id}" class="node {box.kind}"><title>{title}</title>{shape}{texts}</g>'


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
