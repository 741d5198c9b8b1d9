"""dnnl: host steps (byoc_dnnl.host): integer ids and masks, quantized embeddings, ArgMax after the
kernels."""

from __future__ import annotations

import json
import struct

import byoc
import numpy as np
import onnx
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import plugin

from .helpers import DNNL, MODES, conv_stem, dnnl_step, rand, replace_graph


def embedded_pooling(seq: int = 6, vocab: int = 11, e: int = 8) -> onnx.ModelProto:
    """A sentence encoder's ends as BERT exports write them: int64 token ids look up rows of a
    word embedding table (Gather), plus position embeddings, a dense layer; then mean pooling
    under the int64 mask, unsqueezed, expanded to the hidden size and cast to float32; the ids
    are also an output (an Identity)."""
    i64 = np.int64
    consts = {"words": rand(vocab, e), "pos": rand(1, seq, e), "w": rand(e, e), "b": rand(e)}
    consts |= {"last": np.array([-1], i64), "full": np.array([1, seq, e], i64)}
    consts |= {"axis1": np.array([1], i64), "tiny": np.float32(1e-9)}
    nodes = [
        node("Gather", ["words", "ids"], "emb"),
        node("Add", ["emb", "pos"], "e1"),
        node("MatMul", ["e1", "w"], "h0"),
        node("Add", ["h0", "b"], "h"),
        node("Unsqueeze", ["mask", "last"], "m1"),
        node("Expand", ["m1", "full"], "m2"),
        node("Cast", ["m2"], "m3", to=onnx.TensorProto.FLOAT),
        node("Mul", ["h", "m3"], "hm"),
        node("ReduceSum", ["hm", "axis1"], "total", keepdims=0),
        node("ReduceSum", ["m3", "axis1"], "count", keepdims=0),
        node("Clip", ["count", "tiny"], "count1"),
        node("Div", ["total", "count1"], "y"),
        node("Identity", ["ids"], "ids_out"),
    ]
    inputs = {"ids": (i64, [1, seq]), "mask": (i64, [1, seq])}
    return make_model(nodes, inputs, ["y", "ids_out"], consts, opset=18)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_integer_ids_and_mask_are_read_in_the_partition(mode: dict, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Gather of embedding rows at int64 ids, the mask's Unsqueeze, Expand and Cast, and the
    Identity output of the ids run in the dnnl partition (host steps before its native net):
    no onnxruntime segment is left, the outputs match onnxruntime (the int64 output exactly,
    negative ids included), and the compiled model saves and loads back. An id outside the
    table is an InputError naming the Gather, as onnxruntime refuses it."""
    model = embedded_pooling()
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    ids = np.array([[3, 0, 10, -1, 7, 7]], np.int64)
    mask = np.array([[1, 1, 1, 1, 0, 0]], np.int64)
    report = assert_matches_onnxruntime(model, config, {"ids": ids, "mask": mask})
    assert {d.backend for d in report.plan.decisions.values()} == {"dnnl"}
    assert not report.plan.segments
    compiled = byoc.compile(model, config)
    graph = dnnl_step(compiled).artifact.graph
    assert graph["format"] == "byoc-dnnl-json/2"
    hosted = [n["kind"] for n in graph["nodes"] if n["op"] == "host"]
    assert sorted(hosted) == ["cast", "expand", "gather", "reshape", "reshape"]
    out = compiled.run({"ids": ids, "mask": mask})
    assert out["ids_out"].dtype == np.int64 and not np.shares_memory(out["ids_out"], ids)
    np.testing.assert_array_equal(out["ids_out"], ids)
    again = byoc.load(compiled.save(tmp_path / "pooling.byoc"))
    np.testing.assert_array_equal(again.run({"ids": ids, "mask": mask})["y"], out["y"])
    with pytest.raises(byoc.InputError, match=r"an index is outside \[-11, 10\]"):
        compiled.run({"ids": ids + 5, "mask": mask})


@pytest.mark.usefixtures("keep_tiny")
@pytest.mark.parametrize("table", ["uint8", "int8"])
def test_quantized_embeddings_are_read_in_the_partition(table: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``quantize_dynamic`` quantizes a transformer's Gathers: rows of a u8 (or i8) table, then
    DequantizeLinear. The Gather and its DequantizeLinear are host steps (the table stays u8 in
    the artifact and in memory), a DequantizeLinear of constant rows is a float32 constant, and
    the Add reading them joins the partition; the outputs match onnxruntime's, and the model
    saves and loads back. A DequantizeLinear of a layer's weights is a float32 constant too,
    and the MatMul reading it joins the partition."""
    rng = np.random.default_rng(1)
    q = np.dtype(table)
    lo, hi = np.iinfo(q).min, np.iinfo(q).max
    consts = {
        "words": rng.integers(lo, hi + 1, (11, 8)).astype(q),
        "pos": rng.integers(lo, hi + 1, (1, 6, 8)).astype(q),
        "s": np.float32(0.02),
        "z": np.array(3, q),
        "w": rand(8, 8),
        "wq": rng.integers(-100, 100, (8, 8)).astype(np.int8),
    }
    nodes = [
        node("Gather", ["words", "ids"], "gq"),
        node("DequantizeLinear", ["gq", "s", "z"], "emb"),
        node("DequantizeLinear", ["pos", "s", "z"], "p"),
        node("Add", ["emb", "p"], "e1"),
        node("MatMul", ["e1", "w"], "y"),
    ]
    weights = [
        node("DequantizeLinear", ["wq", "s"], "wd"),
        node("MatMul", ["y", "wd"], "y2"),
    ]
    inputs = {"ids": (np.int64, [1, 6])}
    qdq = make_model(nodes + weights, inputs, ["y2"], consts, opset=18)
    decisions = byoc.partition(qdq, DNNL).decisions
    owners = {n: decisions[n].backend for n in ("gq", "emb", "p", "e1", "y", "wd", "y2")}
    assert set(owners.values()) == {"dnnl"}
    assert_matches_onnxruntime(qdq, DNNL, {"ids": np.array([[3, 0, 10, 1, 7, 7]], np.int64)})
    model = make_model(nodes, inputs, ["y"], consts, opset=18)
    config = {**DNNL, "compile": {"placement": "static"}}
    ids = np.array([[3, 0, 10, -1, 7, 7]], np.int64)
    report = assert_matches_onnxruntime(model, config, {"ids": ids})
    assert {d.backend for d in report.plan.decisions.values()} == {"dnnl"}
    compiled = byoc.compile(model, config)
    step = dnnl_step(compiled)
    hosted = [n["kind"] for n in step.artifact.graph["nodes"] if n["op"] == "host"]
    assert hosted == ["gather", "dequantize"]
    assert sorted(w.dtype.name for w in step.artifact.weights.values()) == sorted(
        ["float32"] * 3 + [table, table]  # the folded positions, w, the scale; table, zero
    )
    again = byoc.load(compiled.save(tmp_path / "embeddings.byoc"))
    np.testing.assert_array_equal(again.run({"ids": ids})["y"], compiled.run({"ids": ids})["y"])
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    at = 20 + struct.unpack("<Q", data[12:20])[0]  # the weight index follows the graph
    n = struct.unpack("<Q", data[at : at + 8])[0]
    index = json.loads(data[at + 8 : at + 8 + n])
    name = next(k for k, v in index.items() if len(v) == 3)
    index[name][2] = "float64"  # an integer table's dtype damaged
    text = json.dumps(index).encode()
    bad = data[:at] + struct.pack("<Q", len(text)) + text + data[at + 8 + n :]
    with pytest.raises(byoc.ArtifactError, match=f"weight .{name}. has an unknown dtype"):
        plugin.byoc_deserialize(backend="dnnl", data=bad, trust_native=False)


def test_integer_ops_dnnl_does_not_run_are_refused_with_reason() -> None:
    """A Gather from a computed table, and a Cast to another type than float32, stay with
    onnxruntime, and ``byoc explain`` says why."""
    nodes, consts = conv_stem()
    nodes += [
        node("Gather", ["h", "idx"], "g", axis=1),
        node("Cast", ["idx"], "d", to=onnx.TensorProto.DOUBLE),
    ]
    inputs = {"x": [1, 3, 10, 12], "idx": (np.int64, [2])}
    plan = byoc.partition(make_model(nodes, inputs, ["g", "d"], consts), DNNL)
    reasons = {n: "; ".join(r for _, r in plan.decisions[n].refusals) for n in ("g", "d")}
    assert "Gather reads rows of a constant float32, u8 or i8 table only" in reasons["g"]
    assert "only a Cast to float32 is supported" in reasons["d"]


@pytest.mark.parametrize(
    ("kind", "key", "value", "message"),
    [
        ("gather", "axis", 2, "gather axis 2 is not an axis of its table"),
        ("cast", "dtype", "int64", "a cast makes float32 of an integer tensor"),
        ("expand", "shape", [1, 5, 8], "cannot expand"),
        ("kernel", "inputs", "ids", "a kernel reads an integer tensor"),
    ],
)
def test_host_steps_with_bad_shapes_or_types_are_refused_when_loaded(
    kind: str, key: str, value: object, message: str
) -> None:
    """A damaged graph whose host steps read or make the wrong shapes or types, or whose kernel
    reads an integer tensor, raises ArtifactError when loaded, before any data is read."""
    step = dnnl_step(byoc.compile(embedded_pooling(), {**DNNL, "compile": {"placement": "static"}}))
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    bad = step.artifact.graph
    nodes = bad["nodes"]
    if kind == "kernel":
        target = next(n for n in nodes if n["op"] == "kernel")
        target["inputs"][0] = next(i for i, n in enumerate(nodes) if n.get("name") == "ids")
    else:
        target = next(n for n in nodes if n.get("kind") == kind)
        if key == "axis":
            target["attrs"]["axis"] = value
        else:
            target[key] = value
    with pytest.raises(byoc.ArtifactError, match=message):
        artifact = plugin.byoc_deserialize(
            backend="dnnl", data=replace_graph(data, bad), trust_native=False
        )
        plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})


def ctc_head() -> onnx.ModelProto:
    """A CTC recogniser's end: class scores (ReLU, so some steps tie at 0), their ArgMax per
    step transposed to (batch, steps), and an ArgMin of the last index (ties: the last one)."""
    nodes, consts = conv_stem()
    consts["w1"] = rand(8, 8, 3, 3)
    nodes += [
        node("Conv", ["h", "w1"], "c", pads=[1, 1, 1, 1]),
        node("Relu", ["c"], "scores"),
        node("ArgMax", ["scores"], "best", axis=1),
        node("Transpose", ["best"], "path", perm=[0, 1, 3, 2]),
        node("ArgMin", ["scores"], "least", axis=-1, keepdims=0, select_last_index=1),
    ]
    return make_model(nodes, {"x": [1, 3, 10, 12]}, ["path", "least", "scores"], consts)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_argmax_of_a_kernel_result_runs_after_the_kernels(mode: dict, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ArgMax and ArgMin of the partition's own results, and a Transpose of their int64
    indices, are host steps after the native call: the whole model is one partition, the
    indices equal onnxruntime's (first or last of tied values), and it saves and loads back."""
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    x = rand(1, 3, 10, 12)
    report = assert_matches_onnxruntime(ctc_head(), config, {"x": x})
    assert {d.backend for d in report.plan.decisions.values()} == {"dnnl"}
    compiled = byoc.compile(ctc_head(), config)
    hosted = [n["kind"] for n in dnnl_step(compiled).artifact.graph["nodes"] if n["op"] == "host"]
    assert hosted == ["argmax", "permute", "argmin"]
    ours = compiled.run({"x": x})
    assert ours["path"].dtype == np.int64 and ours["path"].shape == (1, 1, 12, 10)
    assert ours["least"].shape == (1, 8, 10)
    ties = (ours["scores"] == 0).sum()
    assert ties > 0  # the ReLU's zeros tie: onnxruntime's choice among them is matched above
    again = byoc.load(compiled.save(tmp_path / "ctc.byoc")).run({"x": x})
    for name, value in ours.items():
        np.testing.assert_array_equal(again[name], value)


def test_argmax_without_a_kernel_before_it_stays_with_onnxruntime(keep_tiny: None) -> None:
    """An ArgMax of the model's input, or one whose indices a kernel of its partition reads
    (as float32, through a Cast), is left to onnxruntime with a reason; outputs still match."""
    nodes, consts = conv_stem()
    nodes += [
        node("ArgMax", ["x"], "ax", axis=1),
        node("ArgMax", ["h"], "ah", axis=1),
        node("Cast", ["ah"], "f", to=onnx.TensorProto.FLOAT),
        node("Mul", ["h", "f"], "y"),
    ]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["ax", "y"], consts)
    report = assert_matches_onnxruntime(model, {**DNNL, "compile": {"placement": "static"}})
    decisions = report.plan.decisions
    reasons = {n: "; ".join(r for _, r in decisions[n].refusals) for n in ("ax", "ah")}
    assert "no kernel of its partition computes its input" in reasons["ax"]
    assert "a kernel of its partition reads what it computes" in reasons["ah"]
    assert decisions["ax"].backend == decisions["ah"].backend == "onnxruntime"
    assert decisions["h"].backend == "dnnl"


@pytest.mark.parametrize(
    ("kind", "change", "message"),
    [
        ("argmax", {"axis": 4}, "argmax needs an axis of its input"),
        ("argmin", {"last": 2}, "argmin needs an axis of its input, keepdims and last"),
        ("argmax", {"keepdims": 0}, "an argmax makes int64"),
        ("permute", {"perm": [0, 1, 3, 3]}, "is not a permutation"),
    ],
)
def test_damaged_host_steps_after_the_kernels_are_refused_when_loaded(
    kind: str, change: dict, message: str
) -> None:
    step = dnnl_step(byoc.compile(ctc_head(), {**DNNL, "compile": {"placement": "static"}}))
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    bad = step.artifact.graph
    target = next(n for n in bad["nodes"] if n.get("kind") == kind)
    target["attrs"].update(change)
    with pytest.raises(byoc.ArtifactError, match=message):
        artifact = plugin.byoc_deserialize(
            backend="dnnl", data=replace_graph(data, bad), trust_native=False
        )
        plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})
