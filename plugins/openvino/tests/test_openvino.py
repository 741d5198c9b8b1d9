"""openvino against onnxruntime on real models, and what a user of the backend relies on: its
reasons in explain, its options, .byoc files (and hostile ones), threads, fail-safe codegen."""

from __future__ import annotations

import gc
import hashlib
import json
import subprocess
import sys
import weakref
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import byoc
import numpy as np
import onnx
import pytest
from byoc import ArtifactError, BackendError, ConfigError, InputError
from byoc.loading import load_model
from byoc.testing.build import make_model, node
from byoc.testing.kit import assert_matches_onnxruntime
from byoc.testing.models import MODELS
from byoc_openvino import annotate, artifact, plugin, query, runtime, trial
from onnx import helper

STATIC = {"compile": {"placement": "static"}}


def config(**table: Any) -> dict[str, Any]:
    return {"backends": ["openvino"], "backend": {"openvino": table}, **STATIC}


def small_model() -> onnx.ModelProto:
    """Conv -> Relu -> Add(, w) -> Softmax: one openvino partition."""
    rng = np.random.default_rng(0)
    return make_model(
        [
            node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1]),
            node("Relu", ["c"], "r"),
            node("Add", ["r", "b"], "a"),
            node("Softmax", ["a"], "y", axis=-1),
        ],
        {"x": [2, 3, 8, 8]},
        ["y"],
        constants={
            "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            "b": rng.standard_normal((1, 4, 1, 1)).astype(np.float32),
        },
    )


def feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)}


def reference() -> np.ndarray:
    """onnxruntime's output of ``small_model`` on ``feeds``."""
    import onnxruntime as ort

    session = ort.InferenceSession(small_model().SerializeToString())
    return np.asarray(session.run(["y"], feeds())[0])


# -- real models -------------------------------------------------------------------------------


def _inputs(model_id: str, path: Path) -> dict[str, np.ndarray]:
    inputs = byoc.random_inputs(load_model(path, MODELS[model_id].shapes))
    if model_id == "P4":  # the sample rate (random values fail inside its If)
        inputs["sr"] = np.array(16000, np.int64)
    if model_id == "P5":  # token ids: [CLS] ... [SEP]
        ids = inputs["input_ids"]
        ids[:] = np.random.default_rng(0).integers(1000, 20000, ids.shape)
        ids[:, 0], ids[:, -1] = 101, 102
        inputs["attention_mask"][:] = 1
    return inputs


@pytest.mark.realmodel
@pytest.mark.parametrize("model_id", ["P1", "P2", "P3", "P4", "P5"])
def test_real_models_match_onnxruntime(model_id: str, real_model: Any) -> None:
    path = real_model(model_id)
    cfg = {**config(), "shapes": MODELS[model_id].shapes}
    report = assert_matches_onnxruntime(path, cfg, _inputs(model_id, path))
    if model_id != "P4":  # P4's work is inside an If, which stays on onnxruntime
        sizes = [len(p.nodes) for p in report.plan.partitions]
        assert sizes and max(sizes) > 300, sizes  # OpenVINO takes nearly all of the model


# -- annotation --------------------------------------------------------------------------------


def test_explain_shows_openvinos_own_reason() -> None:
    """A node OpenVINO's frontend cannot convert is cut out; its neighbours stay claimed."""
    model = make_model(
        [
            node("Relu", ["x"], "a"),
            node("Pad", ["a", "pads"], "b", mode="wrap"),
            node("Neg", ["b"], "y"),
        ],
        {"x": [1, 4]},
        ["y"],
        constants={"pads": np.array([0, 1, 0, 1], np.int64)},
        opset=19,
    )
    plan = byoc.partition(model, config())
    owners = {name: d.backend for name, d in plan.decisions.items()}
    assert owners["a"] == owners["y"] == "openvino"
    assert owners["b"] == "onnxruntime"
    reasons = dict(plan.decisions["b"].refusals)
    assert "Unsupported padding mode" in reasons["openvino"]
    assert_matches_onnxruntime(model, config())


def test_tiny_divisors_are_refused_and_large_integers_run_on_onnxruntime() -> None:
    """An int64 model input is claimed (OpenVINO computes it in int32): byoc runs it on
    onnxruntime when a value reaches 2**24 (``int_limit``), so the answer is exact either way."""
    model = make_model(
        [
            node("Add", ["i", "one"], "j"),
            node("Div", ["x", "d"], "q"),
            node("Sqrt", ["d"], "s"),
            node("Div", ["x", "s"], "r"),
        ],
        {"i": (np.int64, [4]), "x": [4], "d": [4]},
        ["j", "q", "r"],
        constants={"one": np.array(1, np.int64)},
    )
    plan = byoc.partition(model, config())
    reasons = {n: dict(d.refusals).get("openvino", "") for n, d in plan.decisions.items()}
    assert "x * (1 / y)" in reasons["q"]
    assert plan.decisions["r"].backend == "openvino"  # divided by a square root: safe
    assert plan.decisions["j"].backend == "openvino"
    x = np.ones(4, np.float32)
    compiled = byoc.compile(model, config())
    for i in ([1, 2, 3, 4], [1 << 40, -5, 0, 7]):
        feeds = {"i": np.array(i, np.int64), "x": x, "d": x}
        np.testing.assert_array_equal(compiled.run(feeds)["j"], np.array(i) + 1)


def test_inputs_that_overflow_inside_give_what_onnxruntime_gives() -> None:
    """Conv -> Relu -> Conv -> Relu -> GlobalAveragePool -> MatMul -> Softmax on an input of
    -3e38: the first convolution overflows to +-inf, the second makes NaN of inf - inf, which
    onnxruntime keeps and OpenVINO's Relu maps to 0 (0.25 for each class). An input of
    magnitude 1e15 or more (``max_magnitude``) runs on onnxruntime: its NaN; ordinary inputs
    run on OpenVINO."""
    rng = np.random.default_rng(0)
    weights = {
        "w": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
        "m": rng.standard_normal((8, 4)).astype(np.float32),
        "w2": rng.standard_normal((8, 8, 1, 1)).astype(np.float32),
    }
    model = make_model(
        [
            node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1]),
            node("Relu", ["c"], "r"),
            node("Conv", ["r", "w2"], "c2"),
            node("Relu", ["c2"], "r2"),
            node("GlobalAveragePool", ["r2"], "g"),
            node("Flatten", ["g"], "f"),
            node("MatMul", ["f", "m"], "s"),
            node("Softmax", ["s"], "y", axis=-1),
        ],
        {"x": [1, 3, 8, 8]},
        ["y"],
        weights,
    )
    huge = {"x": np.full((1, 3, 8, 8), -3e38, np.float32)}
    want = _onnxruntime(model, huge)["y"]
    assert np.isnan(want).all()
    raw = byoc.compile(model, {**config(), "fallback": {"nonfinite_inputs": "backend"}})
    assert not np.isnan(raw.run(huge)["y"]).any()  # why the bound exists
    compiled = byoc.compile(model, config())
    (step,) = compiled.steps
    assert step.unit.backend == "openvino", compiled.plan.table()
    x = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(x)["y"], _onnxruntime(model, x)["y"], 1e-5)
    assert step._fallback is None
    np.testing.assert_array_equal(compiled.run(huge)["y"], want)
    assert step._fallback is not None


def test_token_ids_gathered_are_checked_before_openvino_sees_them() -> None:
    """An embedding Gather of a model's token ids (maybe reshaped first) runs on OpenVINO, which
    gives zeros for an id out of range where onnxruntime fails: such ids are refused with an
    InputError. Ids computed from the input (here + 1) cannot be checked: that Gather stays on
    onnxruntime."""
    table = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    constants = {"table": table, "one": np.array(1, np.int64), "row": np.array([5], np.int64)}
    gather = node("Gather", ["table", "ids"], "e")
    flat = [node("Reshape", ["ids", "row"], "flat"), node("Gather", ["table", "flat"], "g")]
    shifted = [node("Add", ["ids", "one"], "next"), node("Gather", ["table", "next"], "f")]
    rounded = [  # indices computed through floats: as unchecked as any others
        node(
            "Cast",
            [
                "ids",
            ],
            "fid",
            to=onnx.TensorProto.FLOAT,
        ),
        node("Cast", ["fid"], "iid", to=onnx.TensorProto.INT64),
        node("Gather", ["table", "iid"], "h"),
    ]
    graph = [gather, *shifted, *flat, *rounded]
    model = make_model(graph, {"ids": (np.int64, [1, 5])}, ["e", "f", "g", "h"], constants)
    plan = byoc.partition(model, config())
    assert plan.decisions["e"].backend == plan.decisions["g"].backend == "openvino"
    for unchecked in ("f", "h"):
        reasons = dict(plan.decisions[unchecked].refusals)
        assert "computed from a model input" in reasons["openvino"]
    both = {"table": table, "row": constants["row"]}
    alone = make_model([gather, *flat], {"ids": (np.int64, [1, 5])}, ["e", "g"], both)
    compiled = byoc.compile(alone, config())
    assert [s.unit.backend for s in compiled.steps] == ["openvino"]
    ids = np.array([[0, 3, -2, 9, -10]], np.int64)
    got = compiled.run({"ids": ids})
    np.testing.assert_array_equal(got["e"], table[ids])
    np.testing.assert_array_equal(got["g"], table[ids.reshape(5)])
    for bad in (10, -11):
        ids[0, 2] = bad
        with pytest.raises(InputError, match=r"outside \[-10, 10\) of Gather"):
            compiled.run({"ids": ids})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_an_opset_11_softmax_over_a_middle_axis_is_refused(op: str) -> None:
    """Before opset 13 the axis flattens the input to 2-D; OpenVINO normalizes over the axis
    alone (0.93 off onnxruntime). Over the last axis the two agree, and it stays claimed."""
    model = make_model(
        [node(op, ["x"], "m", axis=1), node(op, ["m"], "y", axis=2)],
        {"x": [2, 3, 4]},
        ["y"],
        opset=11,
    )
    plan = byoc.partition(model, config())
    assert "flattened at axis 1" in dict(plan.decisions["m"].refusals)["openvino"]
    assert plan.decisions["y"].backend == "openvino"
    assert_matches_onnxruntime(model, config())


def _onnxruntime(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs), strict=True))


def test_int8_products_are_exact_at_any_size() -> None:
    """MatMulInteger and ConvInteger of int8 weights with zero point 0 (onnxruntime's dynamic
    quantization) run in OpenVINO's int8 kernels, exact far above 2**24, and so do the Casts
    to float that read them; with uint8 weights of zero point 136 OpenVINO goes through
    float32 (33 off on these inputs, near 2.7e7), so those stay on onnxruntime. Checked against
    numpy's int64 products: onnxruntime's own are saturated on a CPU without VNNI."""
    k, rng = 1024, np.random.default_rng(0)
    w = rng.integers(-128, 128, (k, 8)).astype(np.int8)
    w[:, 0] = -128
    float32 = onnx.TensorProto.FLOAT
    model = make_model(
        [
            node("MatMulInteger", ["a", "w", "za", "zw"], "p"),
            node("Cast", ["p"], "pf", to=float32),
            node("MatMulInteger", ["a", "u", "za", "zu"], "q"),
            node("Cast", ["q"], "qf", to=float32),
            node("ConvInteger", ["x", "cw", "za", "zw"], "c"),
            node("Cast", ["c"], "cf", to=float32),
        ],
        {"a": (np.uint8, [2, k]), "za": (np.uint8, []), "x": (np.uint8, [1, 128, 4, 4])},
        ["pf", "qf", "cf"],
        constants={
            "w": w,
            "zw": np.array(0, np.int8),
            "u": rng.integers(0, 64, (k, 8)).astype(np.uint8),
            "zu": np.array(136, np.uint8),
            "cw": np.full((4, 128, 3, 3), -128, np.int8),
        },
    )
    plan = byoc.partition(model, config())
    owners = {name: d.backend for name, d in plan.decisions.items()}
    assert owners["p"] == owners["pf"] == owners["c"] == owners["cf"] == "openvino"
    assert owners["q"] == owners["qf"] == "onnxruntime"
    assert "2**24" in dict(plan.decisions["q"].refusals)["openvino"]
    a = np.full((2, k), 255, np.uint8)
    a[1] = rng.integers(0, 256, k)
    inputs = {"a": a, "za": np.array(0, np.uint8), "x": np.full((1, 128, 4, 4), 255, np.uint8)}
    got = byoc.compile(model, config()).run(inputs)
    products = a.astype(np.int64) @ w.astype(np.int64)
    window = np.full((1, 1, 2, 2), 255 * -128 * 128 * 9)  # each 3x3 window of 128 channels
    want = {"pf": products, "cf": np.broadcast_to(window, (1, 4, 2, 2))}
    assert np.abs(want["pf"]).max() > 2**24 and np.abs(want["cf"]).max() > 2**24
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value.astype(np.float32), err_msg=name)
    np.testing.assert_array_equal(got["qf"], _onnxruntime(model, inputs)["qf"])


def _ties() -> np.ndarray:
    """252 values on onnxruntime's rounding ties of DynamicQuantizeLinear's scale for them,
    where OpenVINO's scale, an ulp off, lands 106 of them a step away."""
    top = np.float32(5.2772126)  # top / 255 != top * (1 / 255) in float32
    steps = (np.arange(250, dtype=np.float32) + np.float32(0.5)) * (top / np.float32(255))
    return np.minimum(np.concatenate([[0, top], steps]), top).astype(np.float32)


def test_dynamic_quantization_stays_on_onnxruntime() -> None:
    """OpenVINO's DynamicQuantizeLinear scale is (max - min) * (1 / 255), an ulp off
    onnxruntime's (max - min) / 255: values on onnxruntime's rounding ties land a step away
    (106 of these 252). It runs on onnxruntime, so its outputs are onnxruntime's."""
    x = _ties()[None]
    model = make_model(
        [node("DynamicQuantizeLinear", ["x"], ["q", "scale", "zero"]), node("Relu", ["x"], "r")],
        {"x": [1, x.shape[1]]},
        ["q", "scale", "zero", "r"],
    )
    plan = byoc.partition(model, config())
    assert "an ulp off" in dict(plan.decisions["q"].refusals)["openvino"]
    got, want = byoc.compile(model, config()).run({"x": x}), _onnxruntime(model, {"x": x})
    for name in ("q", "scale", "zero"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def _dynamic_dense() -> onnx.ModelProto:
    """A dense layer as ``quantize_dynamic`` writes it: DynamicQuantizeLinear, MatMulInteger by
    int8 weights (within [-64, 64], so that onnxruntime's products cannot saturate on a CPU
    without VNNI), Cast, times both scales, plus the bias."""
    rng = np.random.default_rng(0)
    return make_model(
        [
            node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
            node("MatMulInteger", ["xq", "w", "xz"], "p"),
            node("Cast", ["p"], "pf", to=onnx.TensorProto.FLOAT),
            node("Mul", ["xs", "ws"], "s"),
            node("Mul", ["pf", "s"], "m"),
            node("Add", ["m", "b"], "y"),
        ],
        {"x": [4, 63]},
        ["y"],
        constants={
            "w": rng.integers(-64, 65, (63, 16)).astype(np.int8),
            "ws": np.float32(0.02),
            "b": rng.standard_normal(16).astype(np.float32),
        },
    )


def test_own_int8_puts_dynamic_quantization_on_openvino_within_the_tolerance() -> None:
    """By default the layer's DynamicQuantizeLinear stays on onnxruntime and the rest runs on
    OpenVINO; with ``int8 = "own"`` OpenVINO claims it too, and the partition, checked on the
    measurement inputs (rounding ties, which OpenVINO's scale moves), is kept because its error
    is within ``[compile] precision_tolerance``: explain and compare show that error, and the
    outputs are OpenVINO's own (not onnxruntime's) within it."""
    from byoc.explain import explain_text
    from byoc.tolerance import precision_error

    model, x = _dynamic_dense(), _ties().reshape(4, 63)
    default = byoc.partition(model, config())
    assert default.decisions["xq"].backend == "onnxruntime"
    assert default.decisions["p"].backend == default.decisions["y"].backend == "openvino"
    own = config(int8="own")
    compiled = byoc.compile(model, own, inputs={"x": x})
    plan = compiled.plan
    (part,) = plan.partitions
    assert part.backend == "openvino" and {"xq", "p", "y"} <= set(part.nodes)
    assert plan.fallback_nodes == []
    verdict = plan.placement.of(part)
    assert verdict.precision == "int8" and verdict.kept
    assert verdict.precision_note.startswith("own int8 arithmetic: error ")
    assert verdict.precision_note.endswith(" <= 0.01")
    assert f"; {verdict.precision_note}" in explain_text(plan)
    error = precision_error([compiled.run({"x": x})["y"]], [_onnxruntime(model, {"x": x})["y"]])
    assert 0 < error <= 0.01
    report = byoc.compare(model, own, inputs={"x": x})
    assert f"{part.name}: {verdict.precision_note}" in report.table()
    assert report.to_json()["partition_notes"] == {part.name: verdict.precision_note}


def test_own_int8_beyond_the_tolerance_falls_back_to_exact_int8() -> None:
    """A tolerance the rounding ties exceed: the partition quantizing with OpenVINO's own
    arithmetic is refused in one warning line, only its DynamicQuantizeLinear goes back to
    onnxruntime, and the rest runs on OpenVINO as without the setting, matching onnxruntime."""
    model, x = _dynamic_dense(), _ties().reshape(4, 63)
    tight = config(int8="own") | {"compile": {"placement": "static", "precision_tolerance": 1e-6}}
    with pytest.warns(UserWarning, match=r"own int8 arithmetic: error .* > \[compile\] prec"):
        compiled = byoc.compile(model, tight, inputs={"x": x})
    plan = compiled.plan
    assert plan.decisions["xq"].backend == "onnxruntime"
    assert "precision_tolerance 1e-06" in dict(plan.decisions["xq"].refusals)["openvino"]
    assert plan.decisions["p"].backend == plan.decisions["y"].backend == "openvino"
    (failed,) = [m for m in plan.placement.measurements if m.failure]
    assert "xq" in failed.nodes and failed.backend == "openvino"
    np.testing.assert_allclose(
        compiled.run({"x": x})["y"], _onnxruntime(model, {"x": x})["y"], rtol=1e-5, atol=1e-5
    )


def test_quantize_linear_stays_on_onnxruntime() -> None:
    """OpenVINO's QuantizeLinear adds the zero point before rounding, in float32: x / scale
    just above a tie (10.500001) becomes 138.5 and rounds to even, a step below onnxruntime's
    139. It runs on onnxruntime, so its outputs are onnxruntime's."""
    model = make_model(
        [node("QuantizeLinear", ["x", "s", "z"], "q"), node("Relu", ["x"], "r")],
        {"x": [40]},
        ["q", "r"],
        constants={"s": np.float32(0.1), "z": np.uint8(128)},
    )
    plan = byoc.partition(model, config())
    assert "adds the zero point before it rounds" in dict(plan.decisions["q"].refusals)["openvino"]
    x = (np.arange(40, dtype=np.float32) - 20 + np.float32(0.5)) * np.float32(0.1)
    x = np.nextafter(x, np.float32(np.inf))  # just above each tie
    got, want = byoc.compile(model, config()).run({"x": x}), _onnxruntime(model, {"x": x})
    np.testing.assert_array_equal(got["q"], want["q"])


def test_a_quantize_linear_only_dequantize_linears_read_runs_on_openvino() -> None:
    """A QDQ convolution: the QuantizeLinears whose integers only DequantizeLinears read are
    roundings to their scale's grid, which OpenVINO folds into its int8 convolution; they are
    claimed, and the model runs in one partition within a rounding tie of onnxruntime (a QDQ
    model cut at every QuantizeLinear ran in a hundred pieces). One whose integers are an
    output of the model stays on onnxruntime (``WRONG``)."""
    rng = np.random.default_rng(0)
    model = make_model(
        [
            node("QuantizeLinear", ["x", "s", "z"], "q"),
            node("DequantizeLinear", ["q", "s", "z"], "dq"),
            node("DequantizeLinear", ["wq", "ws", "wz"], "w"),
            node("Conv", ["dq", "w"], "c", pads=[1, 1, 1, 1]),
            node("Relu", ["c"], "r"),
            node("QuantizeLinear", ["r", "s2", "z"], "q2"),
            node("DequantizeLinear", ["q2", "s2", "z"], "y"),
            node("QuantizeLinear", ["x", "s", "z"], "codes"),
        ],
        {"x": [1, 8, 16, 16]},
        ["y", "codes"],
        constants={
            "s": np.float32(0.02),
            "z": np.uint8(128),
            "s2": np.float32(0.05),
            "wq": rng.integers(-63, 64, (8, 8, 3, 3)).astype(np.int8),
            "ws": np.float32(0.01),
            "wz": np.int8(0),
        },
    )
    report = byoc.compare(model, config())
    assert report.passed, report.table()
    (part,) = report.plan.partitions
    assert {"q", "q2"} <= set(part.nodes) and "codes" not in part.nodes
    assert "adds the zero point" in dict(report.plan.decisions["codes"].refusals)["openvino"]


@pytest.mark.parametrize("between", ["", "Identity", "Transpose", "Slice"])
def test_a_requantization_after_a_concat_is_never_shown_to_openvino(
    between: str, tmp_path: Path
) -> None:
    """Concat, QuantizeLinear, DequantizeLinear, then a QuantizeLinear of that (directly, or
    through an op OpenVINO removes: an Identity, a Transpose by the identity, a Slice of
    everything): OpenVINO 2026.4 crashes the process (a segfault) on such a graph, in
    ``query_model`` and in compiling. byoc cuts every QuantizeLinear from the graph it shows
    OpenVINO (none runs there), and the model matches onnxruntime. In a child process, so that
    a crash fails this test, not the run."""
    nodes = [
        node("Concat", ["x", "x"], "c", axis=1),
        node("QuantizeLinear", ["c", "s", "z"], "q"),
        node("DequantizeLinear", ["q", "s", "z"], "d"),
    ]
    if between == "Identity":
        nodes.append(node("Identity", ["d"], "m"))
    elif between == "Transpose":
        nodes.append(node("Transpose", ["d"], "m", perm=[0, 1, 2]))
    elif between == "Slice":  # of everything
        nodes.append(node("Slice", ["d", "zero", "big", "one"], "m"))
    nodes += [
        node("QuantizeLinear", ["m" if between else "d", "s", "z"], "q2"),
        node("DequantizeLinear", ["q2", "s", "z"], "d2"),
        node("Relu", ["d2"], "y"),
    ]
    constants = {"s": np.float32(0.006), "z": np.uint8(10)}
    if between == "Slice":
        constants |= {k: np.array([v], np.int64) for k, v in (("zero", 0), ("big", 99), ("one", 1))}
    onnx.save(make_model(nodes, {"x": [1, 16, 1]}, ["y"], constants), tmp_path / "m.onnx")
    script = (
        "import byoc\n"
        f"config = {config()!r}\n"
        f"report = byoc.compare({str(tmp_path / 'm.onnx')!r}, config)\n"
        "assert 'openvino' in dict(report.plan.decisions['q2'].refusals)\n"
        "assert report.passed, report.table()\n"
        "assert any(p.backend == 'openvino' for p in report.plan.partitions)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


@pytest.mark.parametrize("other", ["input", "sum", "sigmoid", "silu"])
def test_a_binary_op_after_a_group_norm_does_not_crash_openvino(other: str, tmp_path: Path) -> None:
    """A binary op (or Sum) of a GroupNormalization's output and a tensor another node
    computes (its own input, a Sigmoid of the model's input): OpenVINO 2026.4 crashes compiling
    the pair (a segfault). That op runs on onnxruntime; SiLU spelled Mul(g, Sigmoid(g)) compiles and
    stays OpenVINO's. In a child process, so that a crash fails this test, not the run."""
    nodes = [
        node("Relu", ["x"], "r"),
        node("GroupNormalization", ["r", "scale", "bias"], "g", num_groups=4),
        node("Sigmoid", ["g" if other == "silu" else "x"], "s"),
    ]
    if other in ("input", "sum"):  # a residual of the normalization's input
        nodes.append(node("Add" if other == "input" else "Sum", ["g", "r"], "y"))
    else:
        nodes.append(node("Mul", ["g", "s"], "y"))
    rng = np.random.default_rng(0)
    constants = {k: rng.standard_normal(32).astype(np.float32) for k in ("scale", "bias")}
    model = make_model(nodes, {"x": [2, 32, 9, 16]}, ["y"], constants, opset=21)
    onnx.save(model, tmp_path / "m.onnx")
    script = (
        "import byoc\n"
        f"config = {config(min_partition_nodes=1)!r}\n"
        f"report = byoc.compare({str(tmp_path / 'm.onnx')!r}, config)\n"
        "assert report.passed, report.table()\n"
        "print(report.plan.decisions['y'].backend)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split()[-1] == ("openvino" if other == "silu" else "onnxruntime")


def _group_norm_model(last: str) -> onnx.ModelProto:
    """Relu, GroupNormalization, then SiLU (``last`` "Mul": it compiles) or a residual Add of
    the normalization's input ("Add": OpenVINO 2026.4 crashes compiling it)."""
    rng = np.random.default_rng(0)
    nodes = [
        node("Relu", ["x"], "r"),
        node("GroupNormalization", ["r", "scale", "bias"], "g", num_groups=4),
        node("Sigmoid", ["g"], "s"),
        node(last, ["g", "s" if last == "Mul" else "r"], "y"),
    ]
    constants = {k: rng.standard_normal(32).astype(np.float32) for k in ("scale", "bias")}
    return make_model(nodes, {"x": [2, 32, 9, 16]}, ["y"], constants, opset=21)


def _in_child(script: str, tmp_path: Path) -> str:
    """``script`` run by a fresh Python, after lines that drop the annotation rule keeping
    ``_group_norm_model("Add")`` from OpenVINO, the QuantizeLinear cut from its query, and the
    trials' verdicts in ``tmp_path``; its stdout. A crash fails the test, not the run."""
    prelude = (
        "import warnings, byoc, numpy as np, onnx\n"
        "from pathlib import Path\n"
        "from byoc_openvino import query, rules, trial\n"
        "from byoc_openvino.rules import fusions as f\n"
        "rules.RULES = tuple(r for r in rules.RULES if r.check is not f._binary_after_group_norm)\n"
        "query._never_shown = lambda graph: set()\n"
        f"trial.root = lambda: Path({str(tmp_path / 'trials')!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", prelude + script], capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    return done.stdout


def test_a_model_that_crashes_openvino_costs_its_partition_not_the_process(
    tmp_path: Path,
) -> None:
    """With the annotation rule that keeps it from OpenVINO gone, the GroupNormalization and
    Add that crash OpenVINO's compiler reach codegen: the trial compile in a child process
    crashes instead of this one. With the default backends, onnxruntime runs the partition
    and a warning says why; with ``backends = ["openvino"]``, compiling is an error that says
    so. The verdict is kept: compiling again starts no trial process."""
    onnx.save(_group_norm_model("Add"), tmp_path / "m.onnx")
    out = _in_child(
        f"path = {str(tmp_path / 'm.onnx')!r}\n"
        "others = {'dnnl': {'enabled': False}, 'ccompiler': {'enabled': False}}\n"
        "cfg = {'compile': {'placement': 'static'}, 'backend': {**others, 'openvino': "
        "{'min_partition_nodes': 1}}}\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    report = byoc.compare(path, cfg)\n"
        "assert report.passed, report.table()\n"
        "assert report.plan.partitions == [], report.plan.partitions\n"
        "print([str(w.message) for w in caught if 'trial' in str(w.message)])\n"
        "trial._worker = None\n"
        "try:\n"
        "    byoc.compile(path, {**cfg, 'backends': ['openvino']})\n"
        "except byoc.BackendError as exc:\n"
        "    print(exc)\n"
        "print(trial._worker)\n",
        tmp_path,
    )
    warned, error, worker = out.strip().splitlines()
    assert "openvino_0 (openvino) failed to compile" in warned
    assert "OpenVINO compiling it crashed a trial process (SIGSEGV)" in warned
    assert "partition openvino_0 (backend openvino): OpenVINO compiling it crashed" in error
    assert worker == "None"  # the verdict came from disk
    kept = [p.read_text() for p in (tmp_path / "trials").iterdir()]
    assert sum("crashed" in text for text in kept) == 1, kept


def test_a_byoc_file_whose_partition_crashes_openvino_does_not_load(tmp_path: Path) -> None:
    """A hostile .byoc file: the SiLU partition of a saved model replaced by the residual Add
    that crashes OpenVINO's compiler. Loading it is an error that says so; the loading process
    lives on."""
    compiled = byoc.compile(_group_norm_model("Mul"), config(min_partition_nodes=1))
    assert [s.unit.backend for s in compiled.steps] == ["openvino"]
    path = compiled.save(tmp_path / "m.byoc")

    def residual(model: onnx.ModelProto) -> None:
        last = model.graph.node[-1]
        last.op_type, last.input[1] = "Add", model.graph.node[0].output[0]

    bad = _tamper(path, tmp_path / "bad.byoc", lambda d: _with_model(d, residual))
    out = _in_child(
        f"try:\n    byoc.load({str(bad)!r})\nexcept byoc.ByocError as exc:\n    print(exc)\n",
        tmp_path,
    )
    assert "OpenVINO compiling it crashed a trial process (SIGSEGV)" in out


def test_a_graph_whose_query_crashes_openvino_is_asked_node_by_node(tmp_path: Path) -> None:
    """Concat, QuantizeLinear, DequantizeLinear, QuantizeLinear: with the QuantizeLinear no
    longer cut from the graph OpenVINO is asked about, ``query_model`` on the whole graph
    crashes the trial process; each node is then asked alone, and the model matches
    onnxruntime. The first QuantizeLinear, which only a DequantizeLinear reads, runs on
    OpenVINO; the requantization of the Concat does not."""
    nodes = [
        node("Concat", ["x", "x"], "c", axis=1),
        node("QuantizeLinear", ["c", "s", "z"], "q"),
        node("DequantizeLinear", ["q", "s", "z"], "d"),
        node("QuantizeLinear", ["d", "s", "z"], "q2"),
        node("DequantizeLinear", ["q2", "s", "z"], "d2"),
        node("Relu", ["d2"], "y"),
    ]
    constants = {"s": np.float32(0.006), "z": np.uint8(10)}
    onnx.save(make_model(nodes, {"x": [1, 16, 1]}, ["y"], constants), tmp_path / "m.onnx")
    out = _in_child(
        f"report = byoc.compare({str(tmp_path / 'm.onnx')!r}, {config(min_partition_nodes=1)!r})\n"
        "assert report.passed, report.table()\n"
        "print(sorted(n for p in report.plan.partitions for n in p.nodes))\n",
        tmp_path,
    )
    assert out.split("\n")[0] == "['c', 'd', 'd2', 'q', 'y']"
    kept = [p.read_text() for p in (tmp_path / "trials").iterdir()]
    assert "OpenVINO querying it crashed a trial process (SIGSEGV)" in kept


def test_a_trial_that_hangs_is_stopped_and_tried_again(tmp_path: Path, monkeypatch: Any) -> None:
    """A trial that takes longer than ``trial.TIMEOUT`` is stopped and said so; that verdict
    is not kept, and the next trial (a new worker) compiles the partition and keeps its "ok".
    ``trial = false`` starts no worker at all."""
    monkeypatch.setattr(trial, "root", lambda: tmp_path)
    monkeypatch.setattr(trial, "_worker", None)
    props = runtime.properties(plugin_defaults())
    monkeypatch.setattr(trial, "TIMEOUT", 0.0)
    said = trial.crash("compile", small_model(), props)
    assert said == "OpenVINO compiling it took over 0 s in a trial process (stopped)"
    assert list(tmp_path.iterdir()) == [] and trial._worker is None
    monkeypatch.setattr(trial, "TIMEOUT", 600.0)
    assert trial.crash("compile", small_model(), props) is None
    assert [p.read_text() for p in tmp_path.iterdir()] == ["ok"]
    trial._worker.proc.kill()  # type: ignore[union-attr]
    trial._worker.proc.wait()  # type: ignore[union-attr]
    assert trial.crash("query", small_model(), {}) is None  # a new worker
    monkeypatch.setattr(trial, "_worker", None)
    compiled = byoc.compile(small_model(), config(trial=False, threads=1))
    assert [s.unit.backend for s in compiled.steps] == ["openvino"] and trial._worker is None


def test_a_node_read_only_by_a_quantize_linear_is_still_asked_about() -> None:
    """OpenVINO's frontend cannot convert a MaxPool whose kernel (2, ceil_mode) exceeds its
    1x1 input; only a QuantizeLinear (cut from the graph OpenVINO is asked about) reads it.
    The MaxPool's output stays an output of that graph, so OpenVINO converts it and says
    no; had it been dropped as dead code, the DequantizeLinear's op, whose output bears the
    MaxPool's name (as quantize_static names them), answered for it, and the compile failed
    (a quantized random graph, seed 331)."""
    nodes = [
        node("GlobalMaxPool", ["x"], "g"),
        node("MaxPool", ["g"], "p_in", name="p", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        node("QuantizeLinear", ["p_in", "s", "z"], "q"),
        node("DequantizeLinear", ["q", "s", "z"], "p", name="dq"),
    ]
    constants = {"s": np.float32(0.05), "z": np.uint8(128)}
    model = make_model(nodes, {"x": [2, 4, 3, 3]}, ["p"], constants)
    table = config(min_partition_nodes=1, prune=False)
    refusals = dict(byoc.partition(model, table).decisions["p"].refusals)
    assert "cannot convert it" in refusals["openvino"], refusals
    x = np.random.default_rng(0).standard_normal((2, 4, 3, 3)).astype(np.float32)
    got = byoc.compile(model, table).run({"x": x})["p"]
    np.testing.assert_array_equal(got, _onnxruntime(model, {"x": x})["p"])


def test_qlinearconv_stays_on_onnxruntime() -> None:
    """OpenVINO's QLinearConv with per-channel weight scales (quantize_static's default) is
    off onnxruntime's exact integer result by up to dozens of steps; it runs on onnxruntime."""
    rng = np.random.default_rng(0)
    constants = {
        "xs": np.float32(0.02), "xz": np.uint8(128),
        "w": rng.integers(-63, 64, (16, 16, 3, 3)).astype(np.int8),
        "ws": (rng.random(16) * 0.01 + 0.001).astype(np.float32), "wz": np.zeros(16, np.int8),
        "ys": np.float32(0.37), "yz": np.uint8(131),
    }  # fmt: skip
    model = make_model(
        [
            node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], "q", pads=[1] * 4),
            node("Relu", ["f"], "r"),
        ],
        {"x": (np.uint8, [1, 16, 16, 16]), "f": [4]},
        ["q", "r"],
        constants=constants,
    )
    plan = byoc.partition(model, config())
    assert "per-channel weight scales" in dict(plan.decisions["q"].refusals)["openvino"]
    inputs = {"x": rng.integers(0, 256, (1, 16, 16, 16)).astype(np.uint8), "f": np.ones(4, "f4")}
    got, want = byoc.compile(model, config()).run(inputs), _onnxruntime(model, inputs)
    np.testing.assert_array_equal(got["q"], want["q"])


def test_strings_stay_on_onnxruntime() -> None:
    """A node reading strings (a tokenizer's passthrough) is not offered to OpenVINO, which
    the backend hands numbers and booleans only: it runs on onnxruntime, the rest on
    OpenVINO. It was claimed, and the compile failed ("'s' is object, not one of ...")."""
    model = make_model(
        [node("Identity", ["s"], "t"), node("Relu", ["x"], "r")],
        {"s": (np.str_, [2]), "x": [2]},
        ["t", "r"],
    )
    plan = byoc.partition(model, config(min_partition_nodes=1))
    assert "'s' is object" in dict(plan.decisions["t"].refusals)["openvino"]
    inputs = {"s": np.array(["a", "bc"], dtype=object), "x": np.array([-1, 2], np.float32)}
    compiled = byoc.compile(model, config(min_partition_nodes=1), inputs=inputs)
    assert [s.unit.backend for s in compiled.steps] == ["onnxruntime", "openvino"]
    got = compiled.run(inputs)
    assert list(got["t"]) == ["a", "bc"] and list(got["r"]) == [0, 2]


@pytest.mark.parametrize("indices_read", [True, False])
def test_topk_ties_break_as_onnx_says(indices_read: bool) -> None:
    """OpenVINO's TopK picks other indices than onnxruntime among equal values (ONNX: the lower
    index first). A TopK whose indices are read runs on onnxruntime; one whose values alone
    are read stays OpenVINO's. Both match onnxruntime on an input full of ties."""
    outputs = ["i", "v"] if indices_read else ["v"]
    model = make_model(
        [
            node("Relu", ["x"], "r"),
            node("TopK", ["r", "k"], ["t", "ti"], axis=-1),
            node("Mul", ["t", "t"], "v"),
            node("Cast", ["ti"], "i", to=onnx.TensorProto.FLOAT),
        ][: 4 if indices_read else 3],
        {"x": [2, 4000]},
        outputs,
        constants={"k": np.array([1000], np.int64)},
    )
    plan = byoc.partition(model, config())
    refusals = dict(plan.decisions["t"].refusals)
    if indices_read:
        assert "does not break ties by the lower index" in refusals["openvino"]
    else:
        assert "openvino" not in refusals
        assert plan.decisions["t"].backend == "openvino"
    x = np.random.default_rng(0).integers(0, 50, (2, 4000)).astype(np.float32)
    got, want = byoc.compile(model, config()).run({"x": x}), _onnxruntime(model, {"x": x})
    for name in outputs:
        np.testing.assert_array_equal(got[name], want[name])


def test_a_worker_that_cannot_start_fails_every_trial_once(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A worker that ends by itself (here: no Python to run it) makes every trial of this
    process fail, and onnxruntime runs the partition: one failed start, not one per model."""
    monkeypatch.setattr(trial, "root", lambda: tmp_path)
    monkeypatch.setattr(trial, "_worker", None)
    monkeypatch.setattr(trial, "_broken", None)
    monkeypatch.setattr(sys, "executable", "/bin/false")
    started: list[Any] = []
    monkeypatch.setattr(
        trial.subprocess, "Popen", lambda *a, **k: started.append(a) or _popen(*a, **k)
    )
    said = trial.crash("compile", small_model(), runtime.properties(plugin_defaults()))
    assert said is not None and "the trial process ended" in said and "exit code 1" in said
    reg = byoc.Registry(only=["openvino"])  # the default backends: fail safe
    compiled = byoc.compile(small_model(), STATIC, registry=reg)
    assert [s.unit.backend for s in compiled.steps] == ["onnxruntime"]
    assert len(started) == 1 and list(tmp_path.iterdir()) == []


_popen = subprocess.Popen


def test_the_command_survives_a_worker_that_ends_while_it_writes(tmp_path: Path) -> None:
    """`byoc compare` sends a 147 KB model to a trial worker that has ended (no Python to run
    it): the write meets a closed pipe. The command went down with SIGPIPE, silently (it had
    reset SIGPIPE so that `byoc explain M | head -1` ends quietly); now the trial fails, and
    onnxruntime runs the model."""
    script = (
        "import sys\n"
        "from byoc import cli\n"
        "from byoc.testing.build import make_model, node\n"
        "w = np.random.default_rng(0).standard_normal((64, 64, 3, 3)).astype(np.float32)\n"
        "conv = node('Conv', ['x', 'w'], 'y', pads=[1, 1, 1, 1])\n"
        f"path = {str(tmp_path / 'conv.onnx')!r}\n"
        "onnx.save(make_model([conv], {'x': [1, 64, 8, 8]}, ['y'], {'w': w}), path)\n"
        f"cfg = Path({str(tmp_path / 'ov.toml')!r})\n"
        "cfg.write_text('backends = [\"openvino\"]')\n"
        "sys.executable = '/bin/false'\n"
        "sys.argv = ['byoc', 'compare', path, '-c', str(cfg)]\n"
        "print('exit', cli.main())\n"
    )
    out = _in_child(script, tmp_path)
    assert "ran: onnxruntime only" in out and out.strip().endswith("exit 0")


@pytest.mark.parametrize(
    ("op", "dtype"), [("Mul", np.int8), ("Sub", np.uint8), ("Neg", np.int8), ("Add", np.int8)]
)
def test_8_bit_integer_arithmetic_that_may_overflow_stays_on_onnxruntime(
    op: str, dtype: Any
) -> None:
    """ONNX wraps an integer result around (int8 -60 * 3 is 76, uint8 0 - 3 is 253);
    OpenVINO's CPU plugin saturates 8-bit ones (-128, 0). The op stays on onnxruntime; the
    Transpose after it, which moves values, stays OpenVINO's."""
    inputs = ["x"] if op == "Neg" else ["x", "k"]
    nodes = [node(op, inputs, "a"), node("Transpose", ["a"], "y", perm=[1, 0])]
    model = make_model(nodes, {"x": (dtype, [4, 4])}, ["y"], {"k": np.full((4, 4), 3, dtype)})
    info = np.iinfo(dtype)
    x = np.linspace(info.min, info.max, 16).astype(dtype).reshape(4, 4)
    compiled = byoc.compile(model, config(min_partition_nodes=1))
    assert [p.nodes for p in compiled.plan.partitions] == [["y"]]  # the Transpose
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], _onnxruntime(model, {"x": x})["y"])


@pytest.mark.parametrize(
    ("step", "zero_point", "claimed"),
    [
        ("Sign", 3, False),
        ("Sign", 0, True),  # 0 stays exactly 0
        ("Greater", 3, False),
        ("Ceil", 3, False),  # Ceil(2e-9) is 1
        ("Shrink", 3, False),  # lambd 0, bias 0.5: a jump at 0
    ],
)
def test_a_step_of_a_dequantized_value_stays_on_onnxruntime(
    step: str, zero_point: int, claimed: bool
) -> None:
    """QuantizeLinear, DequantizeLinear, Mul by 1.7, then a function with a jump: OpenVINO
    folds the dequantization (q * scale - zero point * scale, and the scale into the Mul), so
    the zero point's 0 comes out 2e-9 and Sign gives 1 where onnxruntime gives 0 (random graph
    4 quantized). The step and the DequantizeLinear stay on onnxruntime (the Mul between may
    stay OpenVINO's: its inputs are exact there), and the outputs are onnxruntime's."""
    last = {"Greater": (["m", "zero"], {}), "Shrink": (["m"], {"lambd": 0.0, "bias": 0.5})}
    inputs, attrs = last.get(step, (["m"], {}))
    nodes = [
        node("QuantizeLinear", ["x", "s", "z"], "q"),
        node("DequantizeLinear", ["q", "s", "z"], "d"),
        node("Mul", ["d", "k"], "m"),
        node(step, inputs, "y", **attrs),
    ]
    constants = {"s": np.float32(0.0123), "z": np.int8(zero_point), "k": np.float32(1.7)}
    model = make_model(nodes, {"x": [1, 8, 6, 6]}, ["y"], {**constants, "zero": np.float32(0)})
    x = np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32) * 0.5
    x.ravel()[::5] = 0  # the zero point
    compiled = byoc.compile(model, config(min_partition_nodes=1))
    got, want = compiled.run({"x": x})["y"], _onnxruntime(model, {"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    decisions = compiled.plan.decisions
    assert (decisions[nodes[3].name].backend == "openvino") == claimed
    assert (decisions[nodes[1].name].backend == "openvino") == claimed
    if not claimed:
        (reason,) = [r for b, r in decisions[nodes[3].name].refusals if b == "openvino"]
        assert f"a {step} ('{nodes[3].name}') of a dequantized value" in reason


@pytest.mark.parametrize("width", [5, 36])
def test_hardmax_ties_mark_the_first(width: int) -> None:
    """OpenVINO's Hardmax marks another of equal maxima than the first (ONNX's) along an axis
    of 8 or more: such a Hardmax runs on onnxruntime, a narrower one stays OpenVINO's. Both
    match onnxruntime on rows full of ties."""
    model = make_model(
        [node("Relu", ["x"], "r"), node("Hardmax", ["r"], "h", axis=-1)], {"x": [64, width]}, ["h"]
    )
    plan = byoc.partition(model, config(min_partition_nodes=1))
    refusals = dict(plan.decisions["h"].refusals)
    if width >= 8:
        assert "does not mark the first of equal maxima" in refusals["openvino"]
    else:
        assert plan.decisions["h"].backend == "openvino"
    x = np.random.default_rng(0).integers(-1, 3, (64, width)).astype(np.float32)
    got = byoc.compile(model, config(min_partition_nodes=1)).run({"x": x})
    np.testing.assert_array_equal(got["h"], _onnxruntime(model, {"x": x})["h"])


def _with_outputs(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> onnx.ModelProto:
    """The model with its outputs declared float32 of these shapes (as an exporter writes)."""
    del model.graph.output[:]
    for name, shape in shapes.items():
        model.graph.output.append(
            helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)
        )
    return model


@pytest.mark.parametrize(
    ("nodes", "inputs", "shape", "words"),
    [
        (  # OpenVINO's Tile of repeats given at run time writes garbage here
            [node("Tile", ["x", "reps"], "t"), node("Relu", ["t"], "y")],
            {"x": [2, 3, 4, 5], "reps": (np.int64, [4])},
            [14, 18, 16, 10],
            "Tile's input 'reps' is computed at run time",
        ),
        (  # OpenVINO compiles an open output shape
            [node("Reshape", ["x", "s"], "t"), node("Relu", ["t"], "y")],
            {"x": [2, 3, 4, 5], "s": (np.int64, [2])},
            [6, 20],
            "Reshape's input 's' is computed at run time",
        ),
        (  # OpenVINO drops the ratio from the compiled model's inputs
            [node("Dropout", ["x", "ratio"], "t"), node("Relu", ["t"], "y")],
            {"x": [2, 3, 4, 5], "ratio": []},
            [2, 3, 4, 5],
            "Dropout's input 'ratio' is computed at run time",
        ),
        (  # OpenVINO folds the Pad into the ConvTranspose's padding, which crops: 7x7, not 9x9
            [
                node("Pad", ["x", "pads"], "t"),
                node(
                    "ConvTranspose",
                    ["t", "w"],
                    "y",
                    kernel_shape=[4, 4],
                    strides=[2, 2],
                    pads=[2, 2, 2, 2],
                    output_padding=[1, 1],
                ),
            ],
            {"x": [2, 8, 3, 3]},
            [2, 6, 9, 9],
            "a zero Pad read by a strided ConvTranspose",
        ),
        (  # OpenVINO moves the stride onto the Relu and loses the padding: 4x10, not 3x9
            [
                node("Relu", ["x"], "t"),
                node(
                    "Conv", ["t", "w1"], "y", kernel_shape=[1, 1], strides=[2, 2], pads=[1, 1, 1, 1]
                ),
            ],
            {"x": [2, 8, 4, 16]},
            [2, 4, 3, 9],
            "a 1x1 convolution with a stride and padding",
        ),
        (  # OpenVINO broadcasts the per-channel operand along the wrong axis: 1.25 off
            [
                node("ReduceMean", ["x"], "t", axes=[-1], keepdims=0),
                node("Mul", ["t", "per_channel"], "y"),
            ],
            {"x": [2, 17, 13]},
            [2, 17],
            "a reduction over the last axis of a batch of signals",
        ),
        (  # the same, a 1-D conv net's pooling into a BatchNormalization
            [
                node("GlobalAveragePool", ["x"], "t"),
                node("BatchNormalization", ["t", "per_channel", "b17", "m17", "v17"], "y"),
            ],
            {"x": [2, 17, 13]},
            [2, 17, 1],
            "a reduction over the last axis of a batch of signals",
        ),
        (  # the same through a Mul by a scalar, as scikit-learn's GaussianNB: 99 off
            [
                node("ReduceSum", ["x", "last"], "t", keepdims=0),
                node("Mul", ["t", "half"], "u"),
                node("Sub", ["per_row", "u"], "y"),
            ],
            {"x": [2, 17, 13]},
            [2, 17],
            "a reduction over the last axis of a batch of signals",
        ),
        (  # OpenVINO's frontend reduces over every axis at opsets 13 to 17: [1, 1], not [8, 1]
            [
                node("ReduceLogSumExp", ["x"], "t", axes=[1], keepdims=1),
                node("Sub", ["x", "t"], "y"),
            ],
            {"x": [8, 3]},
            [8, 3],
            "OpenVINO's ONNX frontend gives 't' the shape [1, 1], ONNX [8, 1]",
        ),
        (  # OpenVINO fuses the PRelu into the dense layer over the last axis: no compile
            [
                node("MatMul", ["x", "w5"], "t"),
                node("Add", ["t", "b5"], "u"),
                node("PRelu", ["u", "slope"], "y"),
            ],
            {"x": [1, 32, 9, 5]},
            [1, 32, 9, 5],
            "a PRelu with a slope along axis 1 after a dense layer",
        ),
        (  # ONNX drops the window ceil_mode would add in the padding, OpenVINO keeps it
            [node("MaxPool", ["x"], "y", kernel_shape=[1, 1], strides=[2, 2], ceil_mode=1)],
            {"x": [1, 1, 2, 2]},
            [1, 1, 1, 1],
            "ONNX drops the last window",
        ),
    ],
)
def test_nodes_openvino_computes_otherwise_stay_on_onnxruntime(
    nodes: list[onnx.NodeProto], inputs: dict[str, Any], shape: list[int], words: str
) -> None:
    """ONNX node tests through OpenVINO found these: each compiled (with `backends` naming
    openvino, where a partition that fails to compile is an error) and ran wrong or not at
    all. Each now stays on onnxruntime, with the reason, and the model matches it."""
    weights = {
        "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
        "w": np.random.default_rng(1).standard_normal((8, 6, 4, 4)).astype(np.float32),
        "w1": np.random.default_rng(2).standard_normal((4, 8, 1, 1)).astype(np.float32),
        "w5": np.random.default_rng(4).standard_normal((5, 5)).astype(np.float32),
        "b5": np.random.default_rng(5).standard_normal(5).astype(np.float32),
        "slope": np.random.default_rng(6).standard_normal((32, 1, 1)).astype(np.float32),
        **{
            k: np.random.default_rng(3).random(17).astype(np.float32) + 0.5
            for k in ("per_channel", "b17", "m17", "v17")
        },
        "last": np.array([2], np.int64),
        "half": np.array(0.5, np.float32),
        "per_row": np.random.default_rng(7).standard_normal((1, 17)).astype(np.float32),
    }
    used = {k: v for k, v in weights.items() if any(k in n.input for n in nodes)}
    model = _with_outputs(make_model(nodes, inputs, [], used), {"y": shape})
    plan = byoc.partition(model, config())
    reasons = [dict(d.refusals).get("openvino", "") for d in plan.decisions.values()]
    assert any(words in r for r in reasons), plan.table()
    rng = np.random.default_rng(0)
    given = {
        "x": rng.standard_normal(inputs["x"]).astype(np.float32),
        "reps": np.array([7, 6, 4, 2], np.int64),
        "s": np.array([6, 20], np.int64),
        "ratio": np.array(0.5, np.float32),
    }
    feed = {k: v for k, v in given.items() if k in inputs}
    got = byoc.compile(model, config(), inputs=feed).run(feed)["y"]
    np.testing.assert_allclose(got, _onnxruntime(model, feed)["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("by", ["scales", "sizes"])
def test_resizes_empty_roi_and_scales_mean_not_given_and_stay_openvinos(by: str) -> None:
    """Exporters write Resize's roi (and scales, when sizes are given) as empty constants:
    "not given", not an empty tensor in the graph. The upsampling nets that do (PP-OCR's
    detector, PicoDet) stay one OpenVINO partition, and match onnxruntime."""
    rng = np.random.default_rng(0)
    empty = np.zeros((0,), np.float32)
    resize_in = ["r", "roi", "scales"] + (["sizes"] if by == "sizes" else [])
    constants = {
        "w": (rng.standard_normal((8, 4, 3, 3)) * 0.2).astype(np.float32),
        "roi": empty,
        "scales": empty if by == "sizes" else np.array([1, 1, 2, 2], np.float32),
        "sizes": np.array([1, 8, 16, 16], np.int64),
    }
    model = make_model(
        [
            node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1]),
            node("Relu", ["c"], "r"),
            node("Resize", resize_in, "u", mode="nearest"),
            node("Sigmoid", ["u"], "y"),
        ],
        {"x": [1, 4, 8, 8]},
        ["y"],
        constants={k: v for k, v in constants.items() if k in resize_in or k == "w"},
    )
    report = assert_matches_onnxruntime(model, config())
    assert {d.backend for d in report.plan.decisions.values()} == {"openvino"}
    assert len(report.plan.partitions) == 1


def test_a_batch_of_signals_reduced_to_one_number_runs_on_openvino() -> None:
    """The sum of a whole (N > 1, C, L) batch times a scalar: a scalar has no channel axis to
    broadcast along wrongly, so OpenVINO runs the pair (the reduced-signal rule once raised
    IndexError on it, which kept the ReduceSum on onnxruntime)."""
    model = make_model(
        [node("ReduceSum", ["x"], "t", keepdims=0), node("Mul", ["t", "half"], "y")],
        {"x": [2, 3, 4]},
        ["y"],
        constants={"half": np.float32(0.5)},
    )
    plan = byoc.partition(model, config())
    assert plan.decisions["t"].backend == "openvino", plan.decisions["t"].refusals
    x = {"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)}
    got = byoc.compile(model, config()).run(x)["y"]
    np.testing.assert_allclose(got, _onnxruntime(model, x)["y"], rtol=1e-5)


def test_a_graph_with_an_empty_tensor_is_not_openvinos() -> None:
    """OpenVINO computed a scalar wrongly (-6.3e-20 for 2.86) in a graph that also held an empty
    tensor: nodes reading or writing one stay on onnxruntime, and the scalar comes out right."""
    model = make_model(
        [
            node("Mul", ["s", "c"], "s2"),
            node("Add", ["s2", "s"], "s3"),
            node("Add", ["e", "s3"], "e2"),
            node("Relu", ["e2"], "e3"),
            node("Exp", ["s3"], "s4"),
        ],
        {"s": [], "e": [0, 4]},
        ["s4", "e3"],
        constants={"c": np.float32(0.5)},
    )
    plan = byoc.partition(model, config())
    assert "is empty" in dict(plan.decisions["e2"].refusals)["openvino"]
    assert plan.decisions["s4"].backend == "openvino"
    inputs = {"s": np.array(0.7, np.float32), "e": np.zeros((0, 4), np.float32)}
    got, want = byoc.compile(model, config()).run(inputs), _onnxruntime(model, inputs)
    np.testing.assert_allclose(got["s4"], want["s4"], rtol=1e-6)
    assert got["e3"].shape == (0, 4)


def test_integer_mod_of_small_values() -> None:
    """Mod of int32 values known to be small (cast from int16), as onnxruntime computes it:
    fmod=0 takes the divisor's sign (Python's %), fmod=1 the dividend's (C's fmod)."""
    int32 = onnx.TensorProto.INT32
    model = make_model(
        [
            node("Cast", ["a16"], "a", to=int32),
            node("Cast", ["b16"], "b", to=int32),
            node("Mod", ["a", "b"], "floor_mod", fmod=0),
            node("Mod", ["a", "b"], "c_mod", fmod=1),
        ],
        {"a16": (np.int16, [64]), "b16": (np.int16, [64])},
        ["floor_mod", "c_mod"],
    )
    plan = byoc.partition(model, config())
    assert {d.backend for d in plan.decisions.values()} == {"openvino"}, plan.table()
    rng = np.random.default_rng(0)
    a = rng.integers(-32768, 32768, 64).astype(np.int16)
    b = (rng.integers(1, 300, 64) * rng.choice([-1, 1], 64)).astype(np.int16)
    a[:6], b[:6] = [-32768, 32767, -7, 7, -7, 7], [-1, -32768, 3, -3, -3, 3]
    inputs = {"a16": a, "b16": b}
    got, want = byoc.compile(model, config()).run(inputs), _onnxruntime(model, inputs)
    for name in ("floor_mod", "c_mod"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_a_graph_queried_is_not_kept_alive() -> None:
    """OpenVINO's answer for a graph is cached by the graph, weakly: once byoc drops the graph
    (and its weights), so does the cache (each compile of gpt2-kv kept 120 MB before)."""
    graph = byoc.Partition("p", "openvino", [], [], [], small_model()).graph
    annotate.check(graph.view(0))  # the whole graph queried, and cached
    assert graph in annotate._facts
    alive = weakref.ref(graph)
    del graph
    gc.collect()
    assert alive() is None


def test_per_node_query_agrees_with_the_whole_graph_query(real_model: Any) -> None:
    path = real_model("P1")
    model = load_model(path, MODELS["P1"].shapes)
    graph = byoc.Partition("p", "openvino", [], [], [], model).graph
    whole = query.Support(graph)
    views = [graph.view(i) for i in range(len(graph.nodes)) if i not in graph.const_nodes]
    assert all(v.name in whole.reasons for v in views)  # every node traced, none asked alone
    for view in views[:60]:
        assert query.ask_alone(view) == whole.reasons[view.name], view.name


def test_annotating_a_thousand_nodes_is_quick() -> None:
    """A chain of 1200 elementwise nodes: one conversion and one query, not 1200 (and no
    snippets pass: with it, OpenVINO's query alone took 10.7 s)."""
    nodes = [node("Relu" if k % 2 else "Neg", [f"v{k}"], f"v{k + 1}") for k in range(1200)]
    model = make_model(nodes, {"v0": [1, 64]}, ["v1200"])
    import time

    start = time.perf_counter()
    plan = byoc.partition(model, config())
    elapsed = time.perf_counter() - start
    assert [len(p.nodes) for p in plan.partitions] == [1200]
    assert elapsed < 8, f"{elapsed:.1f} s"


# -- options -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"precision": "fp16"}, ["precision", "fp16"]),
        ({"threads": -1}, ["threads", "-1"]),
        ({"threads": "2"}, ["threads"]),
        ({"cache_dir": 3}, ["cache_dir"]),
        ({"treads": 2}, ["treads"]),
    ],
)
def test_bad_options_are_config_errors(table: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        byoc.partition(small_model(), config(**table))
    for word in words:
        assert word in str(info.value)


def test_options_reach_openvino(tmp_path: Path) -> None:
    compiled = byoc.compile(small_model(), config(threads=1, cache_dir=str(tmp_path)))
    (step,) = [s for s in compiled.steps if s.unit.backend == "openvino"]
    ov_model = step.runtime.compiled
    assert int(ov_model.get_property("INFERENCE_NUM_THREADS")) == 1
    assert "LATENCY" in str(ov_model.get_property("PERFORMANCE_HINT"))
    assert "float32" in str(ov_model.get_property("INFERENCE_PRECISION_HINT"))
    assert any(tmp_path.iterdir()), "OpenVINO's cache_dir holds nothing"
    np.testing.assert_allclose(compiled.run(feeds())["y"], reference(), 1e-5)


def test_threads_default_to_the_cores_byoc_gives() -> None:
    import os

    assert runtime.threads({"threads": 0}) == len(os.sched_getaffinity(0))
    assert runtime.properties({"threads": 3})["INFERENCE_NUM_THREADS"] == 3
    assert "INFERENCE_PRECISION_HINT" not in runtime.properties({"precision": "dynamic"})


@pytest.mark.skipif(not runtime.has_bf16(), reason="this CPU has no bfloat16")
def test_bf16_precision() -> None:
    compiled = byoc.compile(small_model(), config(precision="bf16"))
    (step,) = [s for s in compiled.steps if s.unit.backend == "openvino"]
    hint = str(step.runtime.compiled.get_property("INFERENCE_PRECISION_HINT"))
    assert "bfloat16" in hint or "bf16" in hint
    np.testing.assert_allclose(compiled.run(feeds())["y"], reference(), atol=0.05)


# -- runtime -----------------------------------------------------------------------------------


def test_inputs_are_checked_and_outputs_are_the_callers() -> None:
    compiled = byoc.compile(small_model(), config())
    (step,) = [s for s in compiled.steps if s.unit.backend == "openvino"]
    x = feeds()["x"]
    first = step.runtime.run([x])[0]
    second = step.runtime.run([x])[0]
    assert first is not second and not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, second)
    strided = np.asfortranarray(x)  # not C-contiguous: copied, same result
    np.testing.assert_array_equal(step.runtime.run([strided])[0], first)
    with pytest.raises(InputError, match=r"float64\[2, 3, 8, 8\], expected float32"):
        step.runtime.run([x.astype(np.float64)])
    with pytest.raises(InputError, match=r"expected float32\[2, 3, 8, 8\]"):
        step.runtime.run([x[:1]])
    with pytest.raises(InputError, match="expected 1 inputs"):
        step.runtime.run([x, x])


def test_eight_threads_get_equal_outputs() -> None:
    compiled = byoc.compile(small_model(), config())
    rng = np.random.default_rng(2)
    batches = [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(8)]
    want = [compiled.run(b)["y"] for b in batches]
    with ThreadPoolExecutor(8) as pool:
        for _ in range(5):
            got = list(pool.map(lambda b: compiled.run(b)["y"], batches))
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w)


def test_an_input_run_again_is_read_again() -> None:
    """An array already bound to a thread's request is not bound again: a change made to it
    in place shows in the next run, from any thread, and no run writes into an earlier output."""
    compiled = byoc.compile(small_model(), config())
    x = feeds()["x"]
    first = compiled.run({"x": x})["y"]
    np.testing.assert_allclose(first, reference(), 1e-5)
    first[...] = -1  # the caller's: later runs give arrays of their own
    x *= 2
    doubled = compiled.run({"x": x})["y"]
    np.testing.assert_array_equal(doubled, compiled.run({"x": x.copy()})["y"])
    assert not np.allclose(doubled, reference(), 1e-5)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: compiled.run({"x": x})["y"], range(16)))
    for g in got:
        np.testing.assert_array_equal(g, doubled)
    assert len({id(g) for g in got}) == 16 and not np.shares_memory(got[0], got[1])
    assert (first == -1).all()


def test_a_partition_that_returns_its_input() -> None:
    """Dropout and Identity vanish in OpenVINO: the output is copied, never left unwritten."""
    model = make_model(
        [node("Dropout", ["x"], "a"), node("Relu", ["a"], "y")], {"x": [3, 4]}, ["a", "y"]
    )
    assert_matches_onnxruntime(model, config())


def test_bool_values_and_read_only_inputs() -> None:
    model = make_model(
        [
            node("Greater", ["x", "zero"], "g"),
            node("And", ["g", "m"], "a"),
            node("Where", ["a", "x", "zero"], "y"),
        ],
        {"x": [3, 4], "m": (np.bool_, [3, 4])},
        ["a", "y"],
        constants={"zero": np.array(0, np.float32)},
    )
    rng = np.random.default_rng(3)
    x = np.frombuffer(rng.standard_normal(12).astype(np.float32).tobytes(), np.float32)
    inputs = {"x": x.reshape(3, 4), "m": rng.random((3, 4)) > 0.5}
    assert not inputs["x"].flags.writeable
    report = assert_matches_onnxruntime(model, config(), inputs)
    assert [p.backend for p in report.plan.partitions] == ["openvino"]


def test_codegen_failure_returns_the_partition_to_onnxruntime(monkeypatch: Any) -> None:
    def broken(model: onnx.ModelProto) -> Any:
        raise RuntimeError("no conversion today")

    partition = byoc.partition(small_model(), config()).partitions[0]
    monkeypatch.setattr(runtime.handles, "convert", broken)
    with pytest.raises(BackendError, match="no conversion today"):
        plugin.byoc_codegen("openvino", partition, dict(plugin_defaults()))
    reg = byoc.Registry(only=["openvino"])  # the default backends: fail safe
    compiled = byoc.compile(small_model(), STATIC, registry=reg)
    assert all(s.unit.backend == "onnxruntime" for s in compiled.steps)
    assert compiled.run(feeds())["y"].shape == (2, 4, 8, 8)


def plugin_defaults() -> dict[str, Any]:
    return {k: v[1] for k, v in plugin.OPTIONS.items()}


# -- .byoc files -------------------------------------------------------------------------------


def test_save_and_load(tmp_path: Path) -> None:
    compiled = byoc.compile(small_model(), config(cache_dir=str(tmp_path / "cache")))
    path = compiled.save(tmp_path / "m.byoc")
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    assert "cache_dir" not in manifest["config"]["openvino"]  # a local option: never saved
    again = byoc.load(path, threads=1)
    (step,) = [s for s in again.steps if s.unit.backend == "openvino"]
    assert int(step.runtime.compiled.get_property("INFERENCE_NUM_THREADS")) == 1
    np.testing.assert_array_equal(again.run(feeds())["y"], compiled.run(feeds())["y"])


def _tamper(path: Path, out: Path, change: Any) -> Path:
    """A copy of a .byoc file whose openvino member is ``change(bytes)``, with every sha256
    and size fixed up, as a hostile author would."""
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(members["manifest.json"])
    for unit in manifest["units"]:
        if unit["backend"] == "openvino":
            data = change(members[unit["member"]])
            members[unit["member"]] = data
            unit["sha256"], unit["size"] = hashlib.sha256(data).hexdigest(), len(data)
    members["manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out


def _with_model(data: bytes, edit: Any) -> bytes:
    """Artifact bytes whose ONNX model ``edit`` changed, header sha256 and size fixed up."""
    found = artifact.decode(data)
    model = onnx.ModelProto()
    model.CopyFrom(found.model)
    edit(model)
    found.model = model
    return artifact.encode(found)


def _external(model: onnx.ModelProto) -> None:
    weight = model.graph.initializer[0]
    weight.ClearField("raw_data")
    del weight.float_data[:]
    weight.data_location = onnx.TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="/etc/passwd")


def _custom_op(model: onnx.ModelProto) -> None:
    model.graph.node[1].domain = "evil.ops"
    model.opset_import.append(helper.make_opsetid("evil.ops", 1))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d[:-5], "sha256"),
        (lambda d: b"garbage" + d, "bad magic"),
        (lambda d: _with_model(d, _external), "not a valid ONNX model|external"),
        (lambda d: _with_model(d, _custom_op), "not one byoc gives to openvino|not a valid"),
    ],
    ids=["truncated", "magic", "external data", "custom op"],
)
def test_tampered_files_are_refused(tmp_path: Path, change: Any, message: str) -> None:
    path = byoc.compile(small_model(), config()).save(tmp_path / "m.byoc")
    bad = _tamper(path, tmp_path / "bad.byoc", change)
    with pytest.raises(ArtifactError, match=message) as info:
        byoc.load(bad)
    assert "openvino artifact" in str(info.value)


def test_the_artifact_carries_onnx_not_openvino_ir(tmp_path: Path) -> None:
    compiled = byoc.compile(small_model(), config())
    (step,) = [s for s in compiled.steps if s.unit.backend == "openvino"]
    data = plugin.byoc_serialize("openvino", step.artifact)
    assert data.startswith(artifact.MAGIC)
    assert b"<net " not in data and b"xml" not in data.lower()
    again = artifact.decode(data)
    assert again.inputs == step.artifact.inputs and again.precision == "f32"


# -- registration ------------------------------------------------------------------------------


def test_availability_and_build(monkeypatch: Any) -> None:
    import sys

    import openvino

    assert plugin._available() is None
    assert plugin.build_id() == f"openvino {openvino.get_version()}"
    backend = byoc.registry().backends["openvino"]
    assert (backend.priority, backend.reference, backend.finite_only) == (5, False, True)
    assert backend.local_options == {"cache_dir", "trial"}
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino fails
    reason = plugin._available()
    assert reason is not None and reason.startswith("openvino cannot be imported")


def test_int64_arrays_of_either_numpy_type_number() -> None:
    """numpy has two int64 types (long and longlong: onnxruntime returns the second); OpenVINO
    takes only the first, so the other is viewed as it, not refused (an OpenVINO partition
    fed by an onnxruntime segment's Shape failed to run)."""
    model = make_model(
        [node("Add", ["i", "one"], "a"), node("Cast", ["a"], "f", to=1), node("Relu", ["f"], "y")],
        {"i": (np.int64, [2, 3])},
        ["y"],
        constants={"one": np.array(1, np.int64)},
    )
    ids = np.arange(-3, 3, dtype=np.longlong).reshape(2, 3)
    if ids.dtype.num == np.dtype(np.int64).num or ids.dtype.itemsize != 8:
        pytest.skip("numpy has one int64 type here")  # Windows: long is 32 bits
    report = assert_matches_onnxruntime(model, config(), {"i": ids})
    assert [p.backend for p in report.plan.partitions] == ["openvino"]


def test_a_model_of_ir_3_saved_and_loaded_runs(tmp_path: Path) -> None:
    """Old exporters (IR 3) list the weights among the graph inputs too, as IR 3 wants; a
    partition's weights are no inputs, so a partition kept IR 3 was invalid ONNX, and the
    .byoc file byoc had just written was refused as damaged on load. Partitions are IR 4."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    helper = onnx.helper
    graph = helper.make_graph(
        [node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1]), node("Relu", ["c"], "y")],
        "ir3",
        [
            helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8]),
            helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [4, 3, 3, 3]),
        ],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=3)
    path = byoc.compile(model, config()).save(tmp_path / "m.byoc")
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = byoc.load(path).run({"x": x})["y"]
    np.testing.assert_allclose(got, _onnxruntime(model, {"x": x})["y"], rtol=1e-4, atol=1e-4)


# -- the model's own nodes (BackendSpec.optimizes_graphs) ---------------------------------------


def _flatten_by_shape() -> onnx.ModelProto:
    """x[n, 4, 2] -> Reshape to [n, 8] by its own Shape -> MatMul w -> Relu: the shape
    computation byoc folds once [shapes] fixes n."""
    return make_model(
        [
            node("Shape", ["x"], "shape"),
            node("Gather", ["shape", "zero"], "rows", axis=0),
            node("Unsqueeze", ["rows", "axes"], "rows1"),
            node("Concat", ["rows1", "minus1"], "to", axis=0),
            node("Reshape", ["x", "to"], "flat"),
            node("MatMul", ["flat", "w"], "mm"),
            node("Relu", ["mm"], "y"),
        ],
        {"x": ["n", 4, 2]},
        ["y"],
        constants={
            "zero": np.array(0, np.int64),
            "axes": np.array([0], np.int64),
            "minus1": np.array([-1], np.int64),
            "w": np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32),
        },
    )


def test_openvino_gets_the_models_own_nodes_with_static_inputs() -> None:
    """byoc folds Shape -> Gather -> Unsqueeze -> Concat into a constant; OpenVINO gets them as
    written (its fusions look for them), under their names, with x's fixed shape."""
    model = _flatten_by_shape()
    cfg = {**config(), "shapes": {"x": [3, 4, 2]}}
    (part,) = byoc.partition(model, cfg).partitions
    assert [n.name for n in part.model.graph.node] == [n.name for n in model.graph.node]
    (x,) = part.model.graph.input
    assert [d.dim_value for d in x.type.tensor_type.shape.dim] == [3, 4, 2]
    onnx.checker.check_model(part.model, full_check=True)
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 4, 2)).astype(np.float32)}
    assert_matches_onnxruntime(model, cfg, feeds)


def test_a_value_computed_elsewhere_is_the_constant_byoc_folded_it_to() -> None:
    """The Reshape's target is the Shape of a Neg that onnxruntime runs, of the partition's own
    input: OpenVINO's partition reads it as the folded constant and leaves the Neg out."""
    model = make_model(
        [
            node("Neg", ["z"], "neg"),
            node("Shape", ["neg"], "to"),
            node("Relu", ["z"], "r"),
            node("Reshape", ["r", "to"], "y"),
        ],
        {"z": [3, 4]},
        ["neg", "y"],
    )
    cfg = config(exclude_ops=["Neg"])
    (part,) = byoc.partition(model, cfg).partitions
    assert [n.op_type for n in part.model.graph.node] == ["Relu", "Reshape"]
    assert [v.name for v in part.model.graph.input] == ["z"]
    (to,) = part.model.graph.initializer
    assert to.name == "to" and onnx.numpy_helper.to_array(to).tolist() == [3, 4]
    feeds = {"z": np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)}
    assert_matches_onnxruntime(model, cfg, feeds)


@pytest.mark.parametrize("ends", [2**63 - 1, 2**40])
def test_a_constant_slice_to_the_end_runs_on_openvino(ends: int) -> None:
    """Slice's "to the end" bound is an int64 past 2**24 that nothing computes with: OpenVINO
    clamps it as ONNX does (a Llama's rotary half-swap split the decoder into five units)."""
    model = make_model(
        [node("Slice", ["x", "starts", "ends", "axes"], "s"), node("Neg", ["s"], "y")],
        {"x": [2, 40]},
        ["y"],
        constants={
            "starts": np.array([3], np.int64),
            "ends": np.array([ends], np.int64),
            "axes": np.array([1], np.int64),
        },
    )
    plan = byoc.partition(model, config())
    assert [u.backend for u in plan.schedule] == ["openvino"]
    feeds = {"x": np.arange(80, dtype=np.float32).reshape(2, 40)}
    assert_matches_onnxruntime(model, config(), feeds)
