"""``byoc partition --format dot|svg``: a picture of the plan, with or without Graphviz."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

import byoc
import onnx
from byoc import render
from byoc.testing.build import diamond, make_model, node

SVG = "{http://www.w3.org/2000/svg}"
ALLOW = {"backends": ["examplejson"], "backend": {"examplejson": {"ops": ["Abs", "Relu", "Add"]}}}


def partition_groups(svg: str) -> dict[str, str]:
    root = ET.fromstring(svg)
    return {
        g.get("id"): "".join(g.itertext())
        for g in root.iter(f"{SVG}g")
        if "cluster" in (g.get("class") or "")
    }


def test_the_svg_without_graphviz_has_one_group_per_partition():
    plan = byoc.partition(diamond(), ALLOW)
    svg = render.to_svg(plan, use_dot=False)
    groups = partition_groups(svg)
    assert sorted(groups) == ["examplejson_0", "examplejson_1"]
    assert "examplejson_0 (examplejson)" in groups["examplejson_0"]
    texts = "".join(ET.fromstring(svg).itertext())
    assert "tanh1" in texts and "Tanh" in texts  # the fallback node is drawn too


def test_dot_source_boxes_partitions_and_greys_the_fallback():
    dot = render.to_dot(byoc.partition(diamond(), ALLOW))
    assert 'subgraph "cluster_examplejson_0"' in dot and 'id="examplejson_1"' in dot
    assert 'label="tanh1\\nTanh", fillcolor="#e0e0e0"' in dot


def test_long_chains_and_large_graphs_collapse():
    ops = ["Relu", "Abs", "Neg", "Exp", "Tanh"] * 4
    nodes = [node(op, [f"v{i}"], f"v{i + 1}") for i, op in enumerate(ops)]
    model = make_model(nodes, {"v0": [4]}, [f"v{len(ops)}"])
    pic = render.picture(byoc.partition(model, {"backends": ["examplejson"]}))
    (chain,) = [b for b in pic.boxes if b.unit is not None]
    assert chain.kind == "chain" and chain.label[0] == "20 ops: Relu, Abs, Neg, Exp, ..."
    pic = render.picture(byoc.partition(model, ALLOW), max_boxes=3)
    assert {b.kind for b in pic.boxes} == {"unit", "input", "output"}


def test_cli_formats(tmp_path):
    onnx.save(diamond(), tmp_path / "m.onnx")
    (tmp_path / "byoc.toml").write_text(
        'backends = ["examplejson"]\n[compile]\nplacement = "static"\n'
    )
    cli = [sys.executable, "-m", "byoc.cli", "partition", tmp_path / "m.onnx"]
    cli += ["-c", tmp_path / "byoc.toml"]
    done = subprocess.run(
        [*cli, "--format", "svg", "-o", tmp_path / "plan.svg"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert partition_groups((tmp_path / "plan.svg").read_text())
    done = subprocess.run([*cli, "--format", "dot"], capture_output=True, text=True)
    assert done.stdout.startswith("digraph plan {")
