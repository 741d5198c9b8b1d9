"""Malformed models: byoc either works or raises a ByocError; never anything else.

The fuzz test mutates small valid models (see ``fuzz_models.py``); the regression tests rebuild,
in code, each input that once made something other than a ByocError escape.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import warnings

import byoc
import numpy as np
import onnx
import pytest
from byoc.testing.build import make_model, node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fuzz_models import BASES, CONFIGS, MUTATIONS, exercise, mutate

OUTCOMES = {"ok", "ModelError", "BackendError", "ArtifactError", "InputError"}


@settings(max_examples=90, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    base=st.sampled_from(sorted(BASES)),
    names=st.lists(st.sampled_from(sorted(MUTATIONS)), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
    to_bytes=st.sampled_from([False] * 5 + [True]),
)
def test_mutated_models_work_or_raise_a_byoc_error(base, names, seed, to_bytes):
    for config in CONFIGS:
        assert exercise(mutate(base, names, seed, to_bytes), config) in OUTCOMES


# -- regressions: each once escaped as something other than a ByocError -----------------------


def test_huge_input_dim_is_an_input_error_for_random_inputs():
    m = make_model([node("Relu", ["x"], "r")], {"x": [2**40, 2**30]}, ["r"])
    with pytest.raises(byoc.InputError, match=r"too big for random inputs"):
        byoc.compare(m, {"backends": []})  # was numpy's ValueError: array is too big


def test_a_model_onnxruntime_refuses_is_a_model_error_in_compare():
    m = make_model([node("Add", ["x", "y"], "a")], {"x": [2], "y": [2]}, ["a"])
    m.graph.input[1].type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    with pytest.raises(byoc.ModelError, match="onnxruntime"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # was onnxruntime's Fail
        byoc.compare(m, {"backends": ["examplejson"]})


def typed(values: list[float]):
    """A damage: the initializer's data in float_data instead of raw_data."""

    def damage(t: onnx.TensorProto) -> None:
        t.ClearField("raw_data")
        t.float_data.extend(values)

    return damage


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda t: setattr(t, "data_type", 99), "initializer 'w' has an unknown element type 99"),
        (lambda t: setattr(t, "raw_data", t.raw_data[:5]), "has 5 bytes of data"),
        # found by core/tests/fuzz/test_fuzz_model.py: each was a ValueError from onnx, deep
        # inside byoc.partition
        (typed([1.0, 2.0, 3.0]), r"has 3 value\(s\), but its dims \[4\] and type float32 need 4"),
        (lambda t: t.segment.SetInParent(), "initializer 'w' is a segment of a tensor"),
    ],
)
def test_a_damaged_initializer_is_a_model_error(damage, words):
    m = make_model([node("Add", ["x", "w"], "a")], {"x": [4]}, ["a"], {"w": np.ones(4, "f4")})
    damage(m.graph.initializer[0])  # data_type 99 was a KeyError deep in onnx.helper
    with pytest.raises(byoc.ModelError, match=words):
        byoc.partition(m, {"backends": ["examplejson"]})


@pytest.mark.parametrize(
    ("attrs", "words"),
    [
        ({}, "has 0 attributes; a Constant has exactly one"),
        ({"value_float": 1.0, "value_int": 2}, "has 2 attributes"),
        (
            {"value": onnx.helper.make_tensor("v", onnx.TensorProto.FLOAT, [3], [1.0])},
            r"the value of node 'c' \(Constant\) has 1 value\(s\), but its dims \[3\]",
        ),
    ],
)
def test_a_constant_without_one_whole_value_is_a_model_error(attrs, words):
    """Found by the fuzzer: a ValueError from inside byoc.partition (the ONNX checker lets
    these through)."""
    m = make_model(
        [node("Constant", [], "c", **attrs), node("Add", ["x", "c"], "y")], {"x": [3]}, []
    )
    m.graph.output.append(onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None))
    with pytest.raises(byoc.ModelError, match=words):
        byoc.partition(m, {"backends": []})


@pytest.mark.parametrize("ops", [None, ["Neg"], ["Relu"]])
def test_dead_code_is_never_run(ops):
    # A partition or segment of dead nodes had no outputs: examplejson refused its own
    # artifact ("output names undefined ids []") and onnxruntime "At least one output".
    m = make_model(
        [node("Relu", ["x"], "dead"), node("Neg", ["x"], "n"), node("Abs", ["dead"], "dead2")],
        {"x": [3]},
        ["n"],
    )
    cfg: dict = {"backends": ["examplejson"]}
    if ops:
        cfg["backend"] = {"examplejson": {"ops": ops}}
    compiled = byoc.compile(m, cfg)
    np.testing.assert_array_equal(compiled.run({"x": np.ones(3, np.float32)})["n"], [-1] * 3)
    listed = [n for p in compiled.plan.partitions for n in p.nodes] + compiled.plan.fallback_nodes
    assert sorted(listed) == ["dead", "dead2", "n"]


# -- the command line: one line on stderr, exit 0, 1 or 2, in a fresh process ----------------

CLI_CASES = [
    ("chain", ["rewire"], 3, False),
    ("conv", ["bad_initializer", "huge_dim"], 347, False),
    ("conv", ["huge_dim", "duplicate_output"], 9, False),
    ("chain", ["wrong_dtype", "nameless"], 100, False),
    ("conv", ["rewire"], 368, False),
    ("symbolic", ["unknown_domain"], 5, False),
    ("chain", ["empty_graph"], 1, False),
    ("chain", [], 4, True),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: "-".join([c[0], *c[1]]))
def test_cli_never_shows_a_traceback(tmp_path, case):
    base, names, seed, to_bytes = case
    model = mutate(base, names, seed, to_bytes)
    path = tmp_path / "m.onnx"
    path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    cfg = tmp_path / "byoc.toml"
    cfg.write_text('backends = ["examplejson"]\n')
    for command in ("partition", "compare"):
        done = subprocess.run(
            [sys.executable, "-m", "byoc.cli", command, str(path), "-c", str(cfg)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode in (0, 1, 2), done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        if done.returncode == 2:
            errors = [ln for ln in done.stderr.splitlines() if ln.startswith("byoc: error:")]
            assert len(errors) == 1, done.stderr


@pytest.mark.parametrize(
    ("op", "attrs", "words"),
    [
        ("MaxPool", {"kernel_shape": [2, 2], "strides": [0, 0]}, "strides = [0, 0]"),
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [0, 1]}, "strides = [0, 1]"),
        ("MaxPool", {"kernel_shape": [0, 2]}, "kernel_shape = [0, 2]"),
        ("MaxPool", {"kernel_shape": [2, 2], "dilations": [0, 1]}, "dilations = [0, 1]"),
        ("MaxPool", {"kernel_shape": [2, 2], "pads": [-1, 0, 0, 0]}, "pads = [-1, 0, 0, 0]"),
        ("Conv", {"strides": [0, 0]}, "strides = [0, 0]"),
        ("Conv", {"group": 0}, "group = [0]"),
        ("Transpose", {"perm": [0, 0, 1, 2]}, "perm = [0, 0, 1, 2]"),
    ],
)
def test_attributes_that_shape_inference_trusts_are_checked_first(op, attrs, words):
    """strides = 0 once killed the process (SIGFPE inside ONNX shape inference)."""
    inputs = ["x", "w"] if op == "Conv" else ["x"]
    weights = [onnx.numpy_helper.from_array(np.ones((2, 2, 3, 3), np.float32), "w")]
    graph = onnx.helper.make_graph(  # not make_model: its shape inference would crash here
        [node(op, inputs, "y", **attrs)],
        "strides",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 8, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, list("nchw"))],
        weights if op == "Conv" else [],
    )
    m = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    for command in (byoc.partition, byoc.compile):
        with pytest.raises(byoc.ModelError, match=re.escape(words)):
            command(m, {"backends": []})


def test_an_opset_newer_than_onnx_knows_is_a_model_error():
    m = make_model([node("Relu", ["x"], "y")], {"x": [2]}, ["y"])
    m.opset_import[0].version = 999
    with pytest.raises(byoc.ModelError, match="imports opset 999 of the ONNX domain"):
        byoc.partition(m)


def test_a_sequence_input_is_a_model_error_that_says_so():
    """byoc makes every input an array: a sequence given as a list reached onnxruntime as one
    tensor, and failed there with "expected to be of type: 3 but received a tensor"."""
    helper = onnx.helper
    items = helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph(
        [node("ConcatFromSequence", ["s"], "y", axis=0)],
        "g",
        [helper.make_value_info("s", helper.make_sequence_type_proto(items))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [6, 3])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(byoc.ModelError, match="input 's' is a sequence; byoc takes tensor inputs"):
        byoc.compare(m, inputs={"s": [np.ones((2, 3), np.float32)] * 2})
    graph = helper.make_graph(  # an optional: "an", not "a"
        [node("OptionalHasElement", ["o"], "y")],
        "g",
        [helper.make_value_info("o", helper.make_optional_type_proto(items))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.BOOL, [])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    with pytest.raises(byoc.ModelError, match="input 'o' is an optional; byoc takes tensor"):
        byoc.partition(m)


def test_a_range_of_a_trillion_elements_is_a_model_error_at_once():
    """ONNX shape inference computed it: 11 GB and 23 s before it failed."""
    m = make_model(
        [node("Range", ["s", "l", "d"], "r"), node("Add", ["r", "x"], "y")],
        {"x": (np.int64, [1])},
        ["y"],
        constants={"s": np.array(0), "l": np.array(2**40), "d": np.array(1)},
    )
    with pytest.raises(byoc.ModelError, match=r"Range.*would make 1099511627776 elements"):
        byoc.partition(m, {"backends": []})


@pytest.mark.parametrize(
    ("elem", "values"),
    [
        (onnx.TensorProto.STRING, [b"abc"]),
        (onnx.TensorProto.COMPLEX64, [1 + 2j]),
    ],
)
def test_a_scalar_initializer_that_is_no_real_number_is_no_range_bound(elem, values):
    """The Range check read every scalar initializer as a float: a string one was a
    ValueError from inside byoc (found by core/tests/fuzz/test_fuzz_model.py)."""
    helper = onnx.helper
    graph = helper.make_graph(
        [node("Identity", ["s"], "y")],
        "g",
        [],
        [helper.make_tensor_value_info("y", elem, [])],
        [helper.make_tensor("s", elem, [], values)],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    assert byoc.partition(m, {"backends": []}).fallback_nodes == ["y"]


@pytest.mark.parametrize(
    ("vector", "inputs", "constants"),
    [
        (node("Concat", ["x", "x"], "v", axis=0), {"x": [2**23]}, {}),  # declared
        (node("Reshape", ["x", "flat"], "v"), {"x": [4096, 4096]}, {"flat": [-1]}),
        (node("Range", ["lo", "hi", "step"], "v"), {}, {"lo": 0, "hi": 2**24, "step": 1}),
    ],
    ids=["declared", "flattened", "ranged"],
)
def test_a_long_vector_does_not_stall_shape_inference(vector, inputs, constants):
    """ONNX data propagation walks each element of a 1-D value that a Cast or an Add reads:
    a model file declaring ``x: [2**40]`` kept loading forever, one of ``[2**23]`` took 12 s,
    and so did a 1-D value of 2**24 inside the graph, a tensor flattened or a Range (found by
    core/tests/fuzz/test_fuzz_model.py)."""
    nodes = [
        vector,
        node("Cast", ["v"], "f", to=onnx.TensorProto.FLOAT),
        node("Add", ["f", "f"], "a"),
        node("Reshape", ["a", "square"], "y"),  # the model's output is 2-D: [4096, 4096]
    ]
    constants = {k: np.array(v, np.int64) for k, v in {**constants, "square": [4096, -1]}.items()}
    m = make_model(nodes, inputs, ["y"], constants)
    start = time.monotonic()
    plan = byoc.partition(m, {"backends": []})
    assert time.monotonic() - start < 3  # 5 to 12 s before
    assert plan.graph.type_of("a").shape == (2**24,)


def test_outputs_declared_without_a_shape_take_the_inferred_one():
    """``make_tensor_value_info(name, type, None)``, or a bare name: onnxruntime runs such a
    model and so does byoc, also where ONNX shape inference cannot type the output (a
    GroupNormalization's); a model the checker refuses for another reason still gets its
    error."""
    m = make_model(
        [
            node("Relu", ["x"], "r"),
            node("Shape", ["r"], "s"),
            node("GroupNormalization", ["r", "scale", "bias"], "y", num_groups=1),
        ],
        {"x": [2, 3]},
        ["y"],
        {"scale": np.ones(3, np.float32), "bias": np.zeros(3, np.float32)},
        opset=21,
    )
    del m.graph.output[:]
    declared = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    m.graph.output.extend([declared, onnx.ValueInfoProto(name="s")])
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    compiled = byoc.compile(m, {"backends": ["examplejson"], "compile": {"placement": "static"}})
    got = compiled.run({"x": x})
    r = np.maximum(x, 0)
    want = (r - r.mean(1, keepdims=True)) / np.sqrt(r.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got["s"], [2, 3])
    assert list(got) == ["y", "s"]
    m.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(byoc.ModelError, match=r"not valid ONNX.*NoSuchOp"):
        byoc.partition(m, {"backends": []})
