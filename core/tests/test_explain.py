"""``byoc explain``: every node's owner, or every backend's reason for refusing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import byoc
import numpy as np
import onnx
from byoc.explain import explain_json, explain_text
from byoc.testing.build import diamond, make_model, node

ALLOW = {"backends": ["examplejson"], "backend": {"examplejson": {"ops": ["Abs", "Relu", "Add"]}}}


def test_partitions_then_fallback_nodes_with_reasons():
    text = explain_text(byoc.partition(diamond(), ALLOW))
    assert text.splitlines()[:2] == [
        "examplejson_0 (examplejson): 2 node(s)",
        "    abs1 (Abs), relu1 (Relu)",
    ]
    assert "onnxruntime: 1 node(s) no backend claimed" in text
    assert "Tanh x1: tanh1\n      - examplejson: Tanh is not in [backend.examplejson] ops" in text


def test_a_merge_a_cycle_prevented_is_explained():
    text = explain_text(byoc.partition(diamond(), ALLOW))
    assert (
        "add1: kept out of examplejson_0 (the partition of 'relu1'): merging would create a "
        "cycle" in " ".join(text.split())
    )
    assert "through 'tanh1'" in text


def test_every_kind_of_reason():
    model = make_model(
        [
            node("Exp", ["x"], "exp1"),  # excluded
            node("Conv", ["x", "w"], "conv1"),  # not supported
            node("Relu", ["exp1"], "lonely"),  # pruned: partition of one node
        ],
        {"x": [1, 2, 4, 4]},
        ["conv1", "lonely"],
        constants={"w": np.ones((2, 2, 1, 1), np.float32)},
    )
    config = {
        "backends": ["examplejson"],
        "backend": {"examplejson": {"exclude_ops": ["Exp"], "min_partition_nodes": 2}},
    }
    reasons = {
        n["name"]: " ".join(r["reason"] for r in n["reasons"])
        for n in explain_json(byoc.partition(model, config))["nodes"]
    }
    assert reasons["exp1"] == "Exp is in [backend.examplejson] exclude_ops"
    assert reasons["conv1"] == "Conv is not supported"
    assert reasons["lonely"].startswith("pruned: its partition has 1 node(s)")


def test_disabled_backend_and_constants():
    config = {"backends": ["examplejson"], "backend": {"examplejson": {"enabled": False}}}
    data = explain_json(byoc.partition(diamond(), config))
    for entry in data["nodes"]:
        assert entry["unit"].startswith("onnxruntime")
        assert entry["reasons"] == [
            {
                "backend": "examplejson",
                "reason": "backend disabled by [backend.examplejson] enabled = false",
            }
        ]


def test_cli_text_json_and_backend_filter(tmp_path):
    onnx.save(diamond(), tmp_path / "m.onnx")
    (tmp_path / "byoc.toml").write_text(
        'backends = ["examplejson"]\n[backend.examplejson]\nops = ["Abs", "Relu", "Add"]\n'
    )
    base = [sys.executable, "-m", "byoc.cli", "explain", tmp_path / "m.onnx", "-c"]
    base.append(tmp_path / "byoc.toml")
    text = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    summary = text.stdout.splitlines()
    assert summary[0].split() == ["op", "type", "nodes", "taken", "by", "left", "on", "onnxruntime",
                                  "because", "(most", "often)"]  # fmt: skip
    tanh = next(line for line in summary if line.startswith("Tanh"))
    assert "onnxruntime 1" in tanh and "not in [backend.examplejson] ops" in tanh
    assert "tanh1" not in text.stdout  # the node list is -v's
    verbose = subprocess.run([*base, "-v"], capture_output=True, text=True, timeout=120)
    assert "tanh1" in verbose.stdout and "examplejson_1" in verbose.stdout
    one = subprocess.run([*base, "--node", "tanh1"], capture_output=True, text=True, timeout=120)
    assert one.stdout.startswith("tanh1 (Tanh): onnxruntime_0 (onnxruntime)")
    typo = subprocess.run([*base, "--node", "tahn1"], capture_output=True, text=True, timeout=120)
    assert typo.returncode == 2 and "near names: tanh1" in typo.stderr
    js = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=120)
    names = [n["name"] for n in json.loads(js.stdout)["nodes"]]
    assert names == ["abs1", "relu1", "tanh1", "add1"]
    bad = subprocess.run([*base, "--backend", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "no backend named 'nope'" in bad.stderr


def test_partition_explain_and_compare_count_the_same_nodes():
    """Constant nodes (a weight behind a Cast) are counted apart everywhere."""
    model = make_model(
        [
            node("Cast", ["w16"], "w", to=onnx.TensorProto.FLOAT),
            node("Add", ["x", "w"], "a"),
            node("Relu", ["a"], "r"),
            node("Tanh", ["r"], "t"),
        ],
        {"x": [4]},
        ["t"],
        {"w16": np.ones(4, np.float16)},
    )
    cfg = {"backends": ["examplejson"], "backend": {"examplejson": {"ops": ["Add", "Relu"]}}}
    plan = byoc.partition(model, cfg)
    assert "2 of 3 nodes claimed by backends; 1 constant node(s)" in plan.table()
    assert "2 of 3 nodes claimed; 1 constant node(s)" in explain_text(plan)
    report = byoc.compare(model, {**cfg, "compile": {"placement": "static"}})
    assert report.ran() == {"examplejson": 2, "onnxruntime": 1}


def test_a_step_prints_without_its_artifact():
    compiled = byoc.compile(diamond(), {"backends": ["examplejson"]})
    _, times = compiled.profile({"data": np.ones((10, 10), np.float32)})
    text = repr(times)
    assert "examplejson_0" in text and compiled.steps[0].artifact.source[:40] not in text


def test_byoc_trace_cuts_long_arguments(tmp_path):
    path = tmp_path / "d.onnx"
    onnx.save(diamond(), path)
    done = subprocess.run(
        [sys.executable, "-m", "byoc.cli", "partition", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "BYOC_TRACE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "byoc_pattern_table" in done.stderr and "...[cut]" in done.stderr
    assert len(done.stderr) < 200_000  # the serialized partitions are not written out
