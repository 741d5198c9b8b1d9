"""dnnl: the lut kind: quantized elementwise chains as lookup tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import byoc
import numpy as np
import onnx
import pytest
from byoc.testing.build import make_model, node
from byoc_dnnl import plugin
from byoc_dnnl.codegen import Artifact

from .helpers import DNNL, dnnl_step, int8_vnni, rand, run_as_written

# Elementwise work between int8 layers in a QDQ graph, on the dequantized values of the first
# layer's output ("d1"), making "e": (nodes, extra constants).
QDQ_CHAINS = {
    "silu": (
        [
            node("Sigmoid", ["d1"], "sig"),
            node("QuantizeLinear", ["sig", "s_sig", "z_sig"], "q_sig"),
            node("DequantizeLinear", ["q_sig", "s_sig", "z_sig"], "d_sig"),
            node("Mul", ["d1", "d_sig"], "e"),
        ],
        {"s_sig": np.float32(1 / 255)},
    ),
    "gelu": (
        [
            node("Div", ["d1", "root2"], "g1"),
            node("Erf", ["g1"], "g2"),
            node("Add", ["g2", "one"], "g3"),
            node("Mul", ["d1", "g3"], "g4"),
            node("Mul", ["g4", "half"], "e"),
        ],
        {"root2": np.float32(2**0.5), "one": np.float32(1), "half": np.float32(0.5)},
    ),
    "leaky-affine": (
        [
            node("LeakyRelu", ["d1"], "l1", alpha=0.1),
            node("Mul", ["l1", "k"], "l2"),
            node("Sub", ["l2", "k"], "e"),
        ],
        {"k": np.float32(1.5)},
    ),
    "tanh": ([node("Tanh", ["d1"], "e")], {}),
    "elu": ([node("Elu", ["d1"], "e", alpha=0.7)], {}),
    "hardswish": ([node("HardSwish", ["d1"], "e")], {}),
    "hardsigmoid": ([node("HardSigmoid", ["d1"], "e", alpha=0.3, beta=0.4)], {}),
    "clip-abs-sqrt": (
        [
            node("Clip", ["d1", "lo", "hi"], "c"),
            node("Abs", ["c"], "a"),
            node("Sqrt", ["a"], "e"),
        ],
        {"lo": np.float32(-1), "hi": np.float32(2)},
    ),
    "pow": ([node("Pow", ["d1", "three"], "e")], {"three": np.float32(3)}),
}


def quantized_chain(chain: str, dtype: str) -> tuple[onnx.ModelProto, float]:
    """x -> QDQ -> Conv of int8 weights -> QDQ -> ``QDQ_CHAINS[chain]`` -> QDQ -> Conv -> QDQ
    -> y, and a GlobalAveragePool of the second QDQ -> p; activations ``dtype`` (u8 or s8);
    and y's scale."""
    rng = np.random.default_rng(11)
    z = {"uint8": np.uint8(128), "int8": np.int8(0)}[dtype]
    zero_sig = {"uint8": np.uint8(0), "int8": np.int8(-128)}[dtype]
    nodes, extra = QDQ_CHAINS[chain]
    c = {
        "sx": np.float32(8 / 255),
        "s1": np.float32(6 / 255),
        "s2": np.float32(4 / 255),
        "sy": np.float32(8 / 255),
        "z": z,
        "z_sig": zero_sig,
        "w1": rng.integers(-127, 128, (8, 8, 3, 3)).astype(np.int8),
        "w2": rng.integers(-127, 128, (8, 8, 1, 1)).astype(np.int8),
        "sw": np.float32(0.1 / 127),
        **extra,
    }
    model = make_model(
        [
            node("QuantizeLinear", ["x", "sx", "z"], "qx"),
            node("DequantizeLinear", ["qx", "sx", "z"], "dx"),
            node("DequantizeLinear", ["w1", "sw"], "dw1"),
            node("Conv", ["dx", "dw1"], "c1", pads=[1, 1, 1, 1]),
            node("QuantizeLinear", ["c1", "s1", "z"], "q1"),
            node("DequantizeLinear", ["q1", "s1", "z"], "d1"),
            *nodes,
            node("QuantizeLinear", ["e", "s2", "z"], "q2"),
            node("DequantizeLinear", ["q2", "s2", "z"], "d2"),
            node("DequantizeLinear", ["w2", "sw"], "dw2"),
            node("Conv", ["d2", "dw2"], "c2"),
            node("QuantizeLinear", ["c2", "sy", "z"], "qy"),
            node("DequantizeLinear", ["qy", "sy", "z"], "y"),
            node("GlobalAveragePool", ["d2"], "p"),
        ],
        {"x": [1, 8, 10, 12]},
        ["y", "p"],
        c,
    )
    return model, float(c["sy"])


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("chain", list(QDQ_CHAINS))
def test_quantized_elementwise_chains_run_as_lookup_tables(
    chain: str, dtype: str, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """The elementwise work between two int8 convolutions of a QDQ graph (a SiLU with its own
    QuantizeLinear, a GELU, activations, affine ops) depends on one u8 or s8 value: it runs as
    a 256-entry lookup table from the first convolution's integers to the second's, computed
    at compile time, and as one to float32 for the pooling that reads it dequantized. The
    outputs equal onnxruntime's run of the graph as written to one quantum; saved, the model
    loads back."""
    model, scale = quantized_chain(chain, dtype)
    x = rand(1, 8, 10, 12)
    if not int8_vnni():
        pytest.skip("int8 layers are refused without VNNI (see saturating_kernels)")
    (as_written, pooled) = run_as_written(model, {"x": x})
    config = {**DNNL, "compile": {"placement": "static"}}
    compiled = byoc.compile(model, config)
    assert [s.unit.backend for s in compiled.steps] == ["dnnl"]
    out = compiled.run({"x": x})
    np.testing.assert_allclose(out["y"], as_written, rtol=0, atol=scale * 1.01)
    np.testing.assert_allclose(out["p"], pooled, rtol=0, atol=1e-6)
    kernels = [n for n in dnnl_step(compiled).artifact.graph["nodes"] if n["op"] == "kernel"]
    kinds = [k["kind"] for k in kernels]
    assert sorted(kinds) == ["binary", "lut", "lut", "pool", "qconv", "qconv"], kinds
    tables = {k["attrs"]["dst"]: k for k in kernels if k["kind"] == "lut"}
    assert set(tables) == {dtype, "float32"}
    chain_nodes = {n.name for n in QDQ_CHAINS[chain][0]}
    assert chain_nodes <= set(tables[dtype]["members"]), tables[dtype]["members"]
    first_conv = next(k for k in kernels if k["kind"] == "qconv")
    assert first_conv["attrs"]["dst"] == dtype  # it writes the integers the tables read
    again = byoc.load(compiled.save(tmp_path / "q.byoc"))
    np.testing.assert_array_equal(again.run({"x": x})["y"], out["y"])


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("entry", "a table entry is not in the type's range"),
        ("table", "the table must be a constant of 256 float32 values"),
        ("source", "the source must be u8 or s8"),
    ],
)
def test_damaged_lookup_tables_are_refused_when_loaded(damage: str, message: str) -> None:
    """A lookup table to u8 holding a fraction, a table that is not 256 values, or a table
    read from float32 values raises ArtifactError when the artifact is loaded."""
    model, _ = quantized_chain("silu", "uint8")
    if not int8_vnni():
        pytest.skip("int8 layers are refused without VNNI (see saturating_kernels)")
    step = dnnl_step(byoc.compile(model, {**DNNL, "compile": {"placement": "static"}}))
    graph, weights = step.artifact.graph, dict(step.artifact.weights)
    nodes = graph["nodes"]
    lut = next(n for n in nodes if n.get("kind") == "lut" and n["attrs"]["dst"] == "uint8")
    if damage == "entry":
        name = nodes[lut["inputs"][1]]["name"]
        weights[name] = weights[name].copy()
        weights[name][3] += 0.5
    elif damage == "table":
        lut["inputs"][1] = next(i for i, n in enumerate(nodes) if n["op"] == "const")
    else:
        lut["inputs"][0] = graph["arg_nodes"][0]
    with pytest.raises(byoc.ArtifactError, match=message):
        plugin.byoc_create_runtime("dnnl", Artifact(json.dumps(graph), weights), {})


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_quantized_splits_and_concats_move_integers(dtype: str) -> None:
    """A QuantizeLinear after each half of a Split, and after a Concat of tensors of three
    other scales (YOLOv8's C2f block), moves in front of them: the slices and the concat move
    u8 or s8 integers, each concat input requantized to the concat's scale by a lookup table,
    and no kernel computes in float32 between the int8 convolutions. The output equals
    onnxruntime's run of the graph as written to one quantum."""
    rng = np.random.default_rng(12)
    z = {"uint8": np.uint8(128), "int8": np.int8(0)}[dtype]
    c = {
        "sx": np.float32(8 / 255),
        "s1": np.float32(6 / 255),
        "s2": np.float32(5 / 255),
        "s3": np.float32(7 / 255),
        "sc": np.float32(9 / 255),
        "sy": np.float32(8 / 255),
        "z": z,
        "w1": rng.integers(-127, 128, (8, 8, 3, 3)).astype(np.int8),
        "w2": rng.integers(-127, 128, (4, 4, 3, 3)).astype(np.int8),
        "w3": rng.integers(-127, 128, (8, 12, 1, 1)).astype(np.int8),
        "sw": np.float32(0.1 / 127),
        "halves": np.array([4, 4], np.int64),
    }

    def qdq(x: str, scale: str, y: str) -> list[onnx.NodeProto]:
        return [
            node("QuantizeLinear", [x, scale, "z"], f"{y}:q"),
            node("DequantizeLinear", [f"{y}:q", scale, "z"], y),
        ]

    model = make_model(
        [
            *qdq("x", "sx", "dx"),
            node("DequantizeLinear", ["w1", "sw"], "dw1"),
            node("Conv", ["dx", "dw1"], "c1", pads=[1, 1, 1, 1]),
            *qdq("c1", "s1", "d1"),
            node("Split", ["d1", "halves"], ["h0", "h1"], axis=1),
            *qdq("h0", "s1", "a"),
            *qdq("h1", "s1", "b"),
            node("DequantizeLinear", ["w2", "sw"], "dw2"),
            node("Conv", ["b", "dw2"], "c2", pads=[1, 1, 1, 1]),
            *qdq("c2", "s2", "d2"),
            node("Add", ["b", "d2"], "r"),
            *qdq("r", "s3", "d3"),
            node("Concat", ["a", "b", "d3"], "cat", axis=1),
            *qdq("cat", "sc", "dcat"),
            node("DequantizeLinear", ["w3", "sw"], "dw3"),
            node("Conv", ["dcat", "dw3"], "c3"),
            *qdq("c3", "sy", "y"),
        ],
        {"x": [1, 8, 10, 12]},
        ["y"],
        c,
    )
    x = rand(1, 8, 10, 12)
    if not int8_vnni():
        pytest.skip("int8 layers are refused without VNNI (see saturating_kernels)")
    (as_written,) = run_as_written(model, {"x": x})
    compiled = byoc.compile(model, {**DNNL, "compile": {"placement": "static"}})
    assert [s.unit.backend for s in compiled.steps] == ["dnnl"]
    y = compiled.run({"x": x})["y"]
    np.testing.assert_allclose(y, as_written, rtol=0, atol=float(c["sy"]) * 1.01)
    nodes = dnnl_step(compiled).artifact.graph["nodes"]
    kernels = [n for n in nodes if n["op"] == "kernel"]

    def integers(k: dict) -> bool:  # what a kernel reads are u8 or s8 tensors
        return all(nodes[i]["attrs"].get("dst") == dtype for i in k["inputs"])

    moves = [k for k in kernels if k["kind"] in ("slice", "concat")]
    assert sorted(k["kind"] for k in moves) == ["concat", "slice", "slice"], kernels
    assert all(integers(k) for k in moves), moves
    luts = [k for k in kernels if k["kind"] == "lut"]
    assert len(luts) == 3 and all(k["attrs"]["dst"] == dtype for k in luts), luts  # a, b, d3
    others = [k["members"] for k in kernels if k["kind"] not in ("qconv", "lut", "slice", "concat")]
    assert others == [["dx:q"], ["b", "r", "d3:q"]], others


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_lookup_tables_give_the_same_integers_with_every_loop(dtype: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The u8 and s8 table loops (AVX-512 VBMI, AVX2, scalar; BYOC_DNNL_LUT_ISA caps the one
    this CPU runs) give the same outputs: a saved QDQ model loaded and run in processes held to
    AVX2 and to the scalar loop equals this process's run."""
    model, _ = quantized_chain("silu", dtype)
    if not int8_vnni():
        pytest.skip("int8 layers are refused without VNNI (see saturating_kernels)")
    x = rand(1, 8, 10, 12)
    compiled = byoc.compile(model, {**DNNL, "compile": {"placement": "static"}})
    path = compiled.save(tmp_path / "q.byoc")
    np.save(tmp_path / "x.npy", x)
    code = (
        "import sys, byoc, numpy as np\n"
        "y = byoc.load(sys.argv[1]).run({'x': np.load(sys.argv[2])})['y']\n"
        "np.save(sys.argv[3], y)\n"
    )
    want = compiled.run({"x": x})["y"]
    for isa in ("avx2", "scalar"):
        out = tmp_path / f"{isa}.npy"
        done = subprocess.run(
            [sys.executable, "-c", code, str(path), str(tmp_path / "x.npy"), str(out)],
            env=dict(os.environ, BYOC_DNNL_LUT_ISA=isa),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        np.testing.assert_array_equal(np.load(out), want)
