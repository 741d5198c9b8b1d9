"""dnnl: pooling kinds (pool, reduce): pooling, reductions as poolings."""

from __future__ import annotations

import byoc
import numpy as np
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_dnnl import ops, plugin

from .helpers import (
    DNNL,
    MODES,
    claimed,
    conv_stem,
    dnnl_impls,
    dnnl_kinds,
    dnnl_step,
    rand,
    replace_graph,
)


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
        ("GlobalAveragePool", {}),
        ("GlobalMaxPool", {}),
    ],
)
def test_pooling(op: str, attrs: dict) -> None:
    nodes, consts = conv_stem()
    model = make_model(
        [*nodes, node(op, ["h"], "y", **attrs)], {"x": [1, 3, 11, 12]}, ["y"], consts
    )
    claimed(assert_matches_onnxruntime(model, DNNL), op)


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_pooling_and_lrn_over_a_plain_source_run_channels_last(mode: dict) -> None:
    """A MaxPool or LRN reading the partition's NCHW input would run oneDNN's scalar
    ``simple_nchw`` or reference kernel (10-100x slower than its jit kernels) where oneDNN
    has no jit kernel for NCHW (pooling on AVX2; LRN depends on the CPU); it runs on a
    channels-last copy instead, in both codegen modes."""
    consts = {"w": rand(16, 32, 3, 3)}
    nodes = [
        node("MaxPool", ["x"], "p", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        node("LRN", ["x"], "n0", size=5, alpha=0.02, beta=0.75, bias=1.5),
        node("MaxPool", ["n0"], "n", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        node("Concat", ["p", "n"], "pn", axis=1),
        node("Conv", ["pn", "w"], "y", pads=[1, 1, 1, 1]),
    ]
    model = make_model(nodes, {"x": [1, 16, 21, 21]}, ["y"], consts)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "MaxPool")
    claimed(report, "LRN")
    impls = dnnl_impls(byoc.compile(model, config))
    assert any(i.startswith("pooling ") for i in impls), impls
    assert any(i.startswith("lrn ") for i in impls), impls
    assert not any(i.split()[1].startswith(ops.SLOW) for i in impls), impls


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_reduce_over_the_spatial_axes_is_a_global_pooling(mode: dict) -> None:
    """Squeeze-excite as Paddle exports it (PP-OCRv6): ReduceMean over axes 2 and 3 with
    keepdims, then 1x1 convs; also without keepdims (a view of the pooled result), ReduceMax,
    axes as an input (opset 18) and a 1-D signal. One partition, pooling kernels."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"w1": rand(4, 8, 1, 1), "w2": rand(8, 4, 1, 1), "sp": np.array([-1, 2], i64)}
    consts |= {"w3": rand(8, 5), "w4": rand(6, 8, 3), "ax": np.array([2], i64)}
    nodes += [
        node("ReduceMean", ["h", "sp"], "m"),  # axes [3, 2] as an input
        node("Conv", ["m", "w1"], "s1"),
        node("Relu", ["s1"], "s2"),
        node("Conv", ["s2", "w2"], "s3"),
        node("Sigmoid", ["s3"], "s4"),
        node("Mul", ["h", "s4"], "se"),
        node("ReduceMax", ["se", "sp"], "g", keepdims=0),  # (1, 8)
        node("Reshape", ["se", "shape"], "seq"),  # (1, 8, 120): a 1-D signal
        node("Conv", ["seq", "w4"], "c1"),
        node("ReduceMean", ["c1", "ax"], "y1", keepdims=0),  # (1, 6)
        node("MatMul", ["g", "w3"], "y0"),
    ]
    consts["shape"] = np.array([1, 8, 120], i64)
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y0", "y1"], consts, opset=18)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    claimed(report, "ReduceMean")
    claimed(report, "ReduceMax")
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()
    assert dnnl_kinds(byoc.compile(model, config)).count("pool") == 3


@pytest.mark.parametrize("mode", MODES, ids=["json", "c"])
def test_reduce_over_adjacent_axes_is_a_pooling(mode: dict) -> None:
    """A sentence embedding's mean pooling (ReduceSum over the tokens of the masked hidden
    states and of the mask, Clip, Div), and reduces over the channels, the last axis, all axes
    (none named), axes of size 1 only, and none (noop_with_empty_axes): one partition whose
    reduce kernels all run oneDNN's jit pooling, in both codegen modes."""
    i64 = np.int64
    nodes, consts = conv_stem()
    consts |= {"w": rand(12, 16), "t": np.array([1], i64), "lo": np.float32(1e-9)}
    consts |= {"c": np.array([1], i64), "cs": np.array([1, 2, 3], i64), "z": np.array([], i64)}
    consts |= {"n": np.array([0], i64), "last": np.array([-1], i64)}
    nodes += [
        node("Reshape", ["h", "seq"], "hs"),  # (1, 80, 12): 80 tokens of 12 features
        node("MatMul", ["hs", "w"], "e"),  # (1, 80, 16)
        node("Mul", ["e", "mask"], "em"),
        node("ReduceSum", ["em", "t"], "s", keepdims=0),  # (1, 16)
        node("ReduceSum", ["mask", "t"], "ms", keepdims=0),  # (1, 1)
        node("Clip", ["ms", "lo"], "mc"),
        node("Div", ["s", "mc"], "y0"),
        node("ReduceSum", ["h", "c"], "y1"),  # over 8 channels of 120 pixels
        node("ReduceMean", ["h", "cs"], "y2", keepdims=0),  # (1,): every axis but the batch
        node("ReduceMax", ["e", "last"], "y3"),  # (1, 80, 1): a rank-3 global pooling
        node("ReduceSum", ["e"], "y4"),  # (1, 1, 1): all axes
        node("ReduceMean", ["e", "n"], "y5"),  # axes of size 1 only: a view
        node("ReduceSum", ["e", "z"], "y6", noop_with_empty_axes=1),  # an identity
    ]
    consts["seq"] = np.array([1, 80, 12], i64)
    outputs = ["y0", "y1", "y2", "y3", "y4", "y5", "y6"]
    model = make_model(nodes, {"x": [1, 3, 10, 12], "mask": [1, 80, 1]}, outputs, consts, opset=18)
    config = {**DNNL, **mode, "compile": {"placement": "static"}}
    report = assert_matches_onnxruntime(model, config)
    for op_type in ("ReduceSum", "ReduceMean", "ReduceMax"):
        claimed(report, op_type)
    assert len(report.plan.partitions) == 1 and not report.plan.segments, report.plan.table()
    compiled = byoc.compile(model, config)
    kinds = dnnl_kinds(compiled)
    assert (kinds.count("reduce"), kinds.count("pool")) == (5, 1), kinds
    impls = [i for s in compiled.steps for _, i in s.runtime.implementations()]
    assert sum(i.startswith("pooling jit") for i in impls) == 6, impls


def test_reduce_over_axes_apart_is_refused_with_reason() -> None:
    """A sum over the channels and the columns (not the rows between them) is no pooling of a
    view: onnxruntime computes it, and byoc explain says why."""
    nodes, consts = conv_stem()
    consts["a"] = np.array([1, 3], np.int64)
    nodes += [node("ReduceSum", ["h", "a"], "y")]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts, opset=18)
    decisions = assert_matches_onnxruntime(model, DNNL).plan.decisions
    assert decisions["y"].backend == "onnxruntime"
    assert any("must be adjacent" in r for _, r in decisions["y"].refusals)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("alg", "median", "unknown reduce algorithm 'median'"),
        ("shape", [1, 1, 10, 1], "reduce: the reduced axes must be adjacent"),
        ("shape", [1, 2, 10, 12], "reduce: an output dim is neither 1 nor kept"),
    ],
)
def test_reduce_kernels_with_bad_shapes_are_refused_when_loaded(key, value, message) -> None:  # type: ignore[no-untyped-def]
    """A damaged graph whose reduce kernel names an unknown algorithm, or whose output shape
    reduces axes apart or shrinks one to neither 1 nor its size, raises ArtifactError before any
    data is read."""
    nodes, consts = conv_stem()
    consts["c"] = np.array([1], np.int64)
    nodes += [node("ReduceSum", ["h", "c"], "y")]
    model = make_model(nodes, {"x": [1, 3, 10, 12]}, ["y"], consts, opset=18)
    step = dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
    data = plugin.byoc_serialize(backend="dnnl", artifact=step.artifact)
    bad = step.artifact.graph
    reduce = next(n for n in bad["nodes"] if n.get("kind") == "reduce")
    if key == "alg":
        reduce["attrs"]["alg"] = value
    else:
        reduce["shape"] = value
    with pytest.raises(byoc.ArtifactError, match=message):
        artifact = plugin.byoc_deserialize(
            backend="dnnl", data=replace_graph(data, bad), trust_native=False
        )
        plugin.byoc_create_runtime(backend="dnnl", artifact=artifact, config={})
