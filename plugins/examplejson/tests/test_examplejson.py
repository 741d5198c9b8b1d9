"""examplejson: each op matches onnxruntime, the text format round-trips, bad text is refused."""

from __future__ import annotations

import byoc
import numpy as np
import pytest
from byoc.testing import assert_matches_onnxruntime
from byoc.testing.build import make_model, node
from byoc_examplejson import Module, codegen
from onnx import helper

ALL = {"backends": ["examplejson"]}
F = [2, 3, 4]

# (op, inputs {name: shape or (dtype, shape)}, attrs, constants, opset)
CASES = [
    *[(op, {"a": F, "b": [3, 1]}, {}, {}, 17) for op in ["Add", "Sub", "Mul", "Max", "Min"]],
    ("Div", {"a": F, "b": [4]}, {}, {}, 17),
    ("Div", {"a": (np.int64, F)}, {}, {"b": np.array([1, 2, -3, 4])}, 17),
    ("Pow", {"a": F}, {}, {"b": np.float32(2.0)}, 17),
    *[
        (op, {"a": F}, {}, {}, 17)
        for op in [
            "Neg",
            "Abs",
            "Exp",
            "Tanh",
            "Relu",
            "Sigmoid",
            "HardSwish",
            "Erf",
            "Floor",
            "Ceil",
            "Identity",
        ]
    ],
    ("Sqrt", {"a": F}, {}, {}, 17),
    ("LeakyRelu", {"a": F}, {"alpha": 0.2}, {}, 17),
    ("HardSigmoid", {"a": F}, {"alpha": 0.3, "beta": 0.4}, {}, 17),
    ("Clip", {"a": F}, {}, {"lo": np.float32(-0.5), "hi": np.float32(0.5)}, 17),
    ("MatMul", {"a": [2, 3, 4], "b": [4, 5]}, {}, {}, 17),
    (
        "Gemm",
        {"a": [4, 3], "b": [5, 4]},
        {"transA": 1, "transB": 1, "alpha": 0.5},
        {"c": np.ones(5, np.float32)},
        17,
    ),
    ("Softmax", {"a": F}, {"axis": 1}, {}, 17),
    ("Softmax", {"a": F}, {}, {}, 11),
    ("LogSoftmax", {"a": F}, {}, {}, 17),
    ("ReduceMean", {"a": F}, {"keepdims": 0}, {"axes": np.array([1, -1])}, 18),
    ("ReduceSum", {"a": F}, {}, {"axes": np.array([0])}, 17),
    ("ReduceMax", {"a": F}, {"axes": [2]}, {}, 17),
    ("Concat", {"a": F, "b": F}, {"axis": 1}, {}, 17),
    ("Reshape", {"a": F}, {}, {"shape": np.array([0, -1])}, 17),
    ("Flatten", {"a": F}, {"axis": 2}, {}, 17),
    ("Transpose", {"a": F}, {"perm": [2, 0, 1]}, {}, 17),
    ("Squeeze", {"a": [2, 1, 4]}, {}, {"axes": np.array([1])}, 17),
    ("Unsqueeze", {"a": F}, {}, {"axes": np.array([0, -1])}, 17),
    ("Cast", {"a": F}, {"to": 7}, {}, 17),
    ("Gather", {"a": F}, {"axis": 1}, {"i": np.array([[0, 2], [-1, 1]])}, 17),
    ("GlobalAveragePool", {"a": [1, 3, 5, 5]}, {}, {}, 17),
    (
        "LayerNormalization",
        {"a": F},
        {"epsilon": 1e-3},
        {"s": np.linspace(0.5, 1.5, 4, dtype=np.float32), "bias": np.ones(4, np.float32)},
        17,
    ),
    (
        "BatchNormalization",
        {"a": [1, 3, 2, 2]},
        {},
        {
            "s": np.ones(3, np.float32),
            "b2": np.zeros(3, np.float32),
            "m": np.arange(3, dtype=np.float32),
            "v": np.full(3, 2, np.float32),
        },
        17,
    ),
    ("Where", {"c": (np.bool_, F), "a": F, "b": F}, {}, {}, 17),
    ("Equal", {"a": (np.int32, F), "b": (np.int32, F)}, {}, {}, 17),
]


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "consts", "opset"),
    CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)],
)
def test_op_matches_onnxruntime(op, inputs, attrs, consts, opset):
    names = [*inputs, *consts]
    model = make_model(
        [node(op, names, "out", **attrs)],
        inputs,
        ["out"],
        constants={k: np.asarray(v) for k, v in consts.items()},
        opset=opset,
    )
    report = assert_matches_onnxruntime(model, ALL, rtol=1e-5, atol=1e-6)
    assert [p.backend for p in report.plan.partitions] == ["examplejson"], report.plan.table()


def test_split_with_several_outputs():
    model = make_model(
        [
            node("Split", ["x"], ["a", "b", "c"], name="split", axis=1, num_outputs=3),
            node("Add", ["a", "c"], "s"),
        ],
        {"x": [2, 7]},
        ["s", "b"],
        opset=18,
    )
    assert_matches_onnxruntime(model, ALL)


def test_float16_ops_compute_in_float32_as_onnxruntime_does():
    """A float16 LayerNormalization of values near 600: their squares overflow float16 (65504),
    and LayerNormalization computes its statistics in float32 (stash_type), as onnxruntime
    runs most float16 ops. examplejson computed it in float16 and was 4.25 off (random graph
    145 --fp16); now each op computes in float32 and rounds its result to float16."""
    model = make_model(
        [node("LayerNormalization", ["x", "g", "b"], "y", axis=-1), node("Neg", ["y"], "z")],
        {"x": (np.float16, [2, 64])},
        ["z"],
        constants={"g": np.ones(64, np.float16), "b": np.zeros(64, np.float16)},
    )
    x = (600 + 8 * np.random.default_rng(0).standard_normal((2, 64))).astype(np.float16)
    report = assert_matches_onnxruntime(model, ALL, inputs={"x": x})
    assert [p.backend for p in report.plan.partitions] == ["examplejson"]


def test_the_guides_example_is_one_subgraph():
    model = make_model(
        [node("Add", ["a", "b"], "x"), node("Sub", ["x", "c"], "y"), node("Mul", ["y", "d"], "z")],
        {k: [10, 10] for k in "abcd"},
        ["z"],
    )
    report = assert_matches_onnxruntime(model, ALL)
    (part,) = report.plan.partitions
    assert codegen(part).splitlines()[:6] == [
        "examplejson_0",
        "  input 0 10 10 dtype: float32",
        "  input 1 10 10 dtype: float32",
        "  input 2 10 10 dtype: float32",
        "  input 3 10 10 dtype: float32",
        "  add 4 inputs: 0 1 shape: 10 10  # x",
    ]


# TVM's guide, exactly as printed: no dtype, no output line.
GUIDE = """subgraph_0
  input 0 10 10
  input 1 10 10
  input 2 10 10
  input 3 10 10
  add 4 inputs: 0 1 shape: 10 10
  sub 5 inputs: 4 2 shape: 10 10
  mul 6 inputs: 5 3 shape: 10 10
"""


def _abcd(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((10, 10)).astype(np.float32) for _ in range(4)]


def test_the_guides_text_loads_and_its_last_node_is_the_output(tmp_path):
    path = tmp_path / "mysubgraph.examplejson"
    path.write_text(GUIDE)
    module = byoc.load_module(path, "examplejson")
    a, b, c, d = _abcd()
    (z,) = module.run([a, b, c, d])
    assert np.array_equal(z, (a + b - c) * d)
    assert module.get_function("subgraph_0").outputs == (6,)


def test_a_module_runs_each_of_several_subgraphs_by_name():
    text = GUIDE + "subgraph_1\ninput 0 10 10\ninput 1 10 10\nmul 2 inputs: 0 1 shape: 10 10\n"
    module = Module(text)
    assert list(module.functions) == ["subgraph_0", "subgraph_1"]
    a, b, c, d = _abcd()
    assert np.array_equal(module.get_function("subgraph_1")([a, b])[0], a * b)
    assert np.array_equal(module.get_function("subgraph_0").run([a, b, c, d])[0], (a + b - c) * d)
    with pytest.raises(byoc.InputError, match=r"2 subgraphs \(subgraph_0, subgraph_1\).*get_fun"):
        module.run([a, b])
    with pytest.raises(byoc.InputError, match="no subgraph 'subgraph_7'; this module has subg"):
        module.get_function("subgraph_7")


def test_indentation_is_optional_on_every_line():
    flat = "\n".join(line.strip() for line in GUIDE.splitlines())
    odd = "\n".join(("\t" if i % 2 else "") + line for i, line in enumerate(GUIDE.splitlines()))
    args = _abcd(1)
    want = Module(GUIDE).run(args)[0]
    assert np.array_equal(Module(flat).run(args)[0], want)
    assert np.array_equal(Module("  " + odd).run(args)[0], want)


def test_serialize_and_deserialize_round_trip():
    model = make_model(
        [node("MatMul", ["x", "w"], "y"), node("Relu", ["y"], "r")],
        {"x": [3, 4]},
        ["r"],
        constants={"w": np.eye(4, dtype=np.float32)},
    )
    compiled = byoc.compile(model, ALL)
    step = compiled.steps[0]
    hook = byoc.plugins.registry().route("examplejson")
    data = hook.byoc_serialize(backend="examplejson", artifact=step.artifact)
    again = hook.byoc_deserialize(backend="examplejson", data=data)
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 6
    assert np.array_equal(Module(again.source).run([x])[0], np.maximum(x, 0))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "first line must be the subgraph name"),
        ("s\n  input 0 2\n  frob 1 inputs: 0 shape: 2\n  output 1\n", "unknown op 'frob'"),
        ("s\n  input 0 2\n  add 1 inputs: 0 7 shape: 2\n  output 1\n", "undefined ids [7]"),
        ("s\n  input 0 2\n  output 3\n", "undefined ids [3]"),
        ("s\n  const 0 shape: 2 2 dtype: float32 data: AAAA\n  output 0\n", "need 16"),
        ("s\n  const 0 shape: 2 dtype: object data: AAAA\n  output 0\n", "unknown dtype"),
        (
            "s\n  input 0 2\n  relu 1 inputs: 0 shape: 2 attrs: [1]\n  output 1\n",
            "expected 'OP IDS",
        ),
        ("s\n  input 0 2\n  relu 1 inputs: 0 shape: 2 attrs: {]\n  output 1\n", "line 3"),
        ("s\n  input 0 -2\n  output 0\n", "line 2"),
        ("s\n  input 0 2\n", "subgraph 's' has no ops and no 'output' line"),
        ("s\n  input 0 2\n  input 0 2\n  output 0\n", "line 3: id 0 is defined twice"),
        ("s\n  input 0 2\n  output 0\n  output 0\n", "a second 'output' line"),
        (GUIDE + GUIDE, "line 9: a second subgraph named 'subgraph_0'"),
        ("  input 0 2\n", "first line must be the subgraph name"),
    ],
)
def test_damaged_text_is_an_artifact_error(text, words):
    hook = byoc.plugins.registry().route("examplejson")
    with pytest.raises(byoc.ArtifactError) as err:
        hook.byoc_deserialize(backend="examplejson", data=text.encode())
    assert words in str(err.value)


def test_wrong_input_to_a_module_is_refused():
    module = Module("s\n  input 0 2 2 dtype: float32\n  relu 1 inputs: 0 shape: 2 2\n  output 1\n")
    with pytest.raises(byoc.InputError, match=r"input 0 is float64\[2, 2\], expected float32"):
        module.run([np.zeros((2, 2))])
    with pytest.raises(byoc.InputError, match="expected 1 inputs, got 2"):
        module.run([np.zeros((2, 2), np.float32)] * 2)


def test_batchnorm_in_training_mode_is_refused_with_a_reason():
    model = make_model(
        [
            node(
                "BatchNormalization",
                ["x", "s", "b", "m", "v"],
                ["y", "rm", "rv"],
                name="bn",
                training_mode=1,
            )
        ],
        {"x": [2, 3, 2, 2]},
        ["y"],
        constants={k: np.ones(3, np.float32) for k in "sbmv"},
        opset=15,
    )
    plan = byoc.partition(model, ALL)
    assert plan.partitions == []
    assert any("inference-mode" in r for _, r in plan.decisions["bn"].refusals)


def test_nodes_onnx_refuses_are_refused_with_a_reason():
    mixed = make_model([node("Add", ["x", "i"], "y")], {"x": [3], "i": (np.int32, [3])}, ["y"])
    wrong = make_model([node("Relu", ["x"], "y")], {"x": [3]}, ["y"])
    wrong.graph.output[0].type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(
        np.dtype(np.int32)
    )
    for model, words in [(mixed, "refuses these inputs"), (wrong, "declared int32")]:
        plan = byoc.partition(model, ALL)
        assert plan.partitions == []
        assert any(words in r for _, r in plan.decisions["y"].refusals), plan.decisions["y"]


def test_integer_div_truncates_and_fails_on_zero_like_onnxruntime():
    model = make_model(
        [node("Div", ["a", "b"], "y")], {"a": (np.int32, [5]), "b": (np.int32, [5])}, ["y"]
    )
    low = np.iinfo(np.int32).min
    a = np.array([7, -7, 5, low, low], np.int32)
    b = np.array([2, 2, low, -1, 3], np.int32)
    report = assert_matches_onnxruntime(model, ALL, {"a": a, "b": b}, rtol=0, atol=0)
    assert [p.backend for p in report.plan.partitions] == ["examplejson"]
    with pytest.raises(byoc.BackendError, match="integer Div divided by zero"):
        static = {**ALL, "compile": {"placement": "static"}}
        byoc.compile(model, static).run({"a": a, "b": np.zeros(5, np.int32)})


def test_ops_are_at_least_25():
    hook = byoc.plugins.registry()
    assert len(hook.supported_ops("examplejson", {})) >= 25


def test_helper_attribute_tensors_are_lists():
    # a Constant node inside a partition model is never emitted: constants come as `const` lines
    model = make_model(
        [
            node("Constant", [], "c", value=helper.make_tensor("c", 1, [2], [1.0, 2.0])),
            node("Mul", ["x", "c"], "y"),
        ],
        {"x": [2]},
        ["y"],
    )
    report = assert_matches_onnxruntime(model, ALL)
    assert "const 1 shape: 2 dtype: float32" in codegen(report.plan.partitions[0])


@pytest.mark.parametrize("spatial", [1, 0])
def test_batchnorm_of_opset_7_runs_per_channel_and_refuses_per_activation(spatial):
    """Opset 7's BatchNormalization may spell out spatial = 1 (per channel, as later opsets):
    it runs (the attribute crashed the kernel: "unexpected keyword argument 'spatial'");
    spatial = 0 keeps statistics per activation, and is refused with the reason."""
    rng = np.random.default_rng(0)
    shape = (4,) if spatial else (4, 5, 5)
    consts = {k: rng.standard_normal(shape).astype(np.float32) for k in ("s", "b", "m")}
    consts["v"] = np.abs(consts["m"]) + 0.5
    nodes = [node("BatchNormalization", ["x", "s", "b", "m", "v"], "y", spatial=spatial)]
    model = make_model(nodes, {"x": [2, 4, 5, 5]}, ["y"], consts, opset=7)
    config = {"backends": ["examplejson"], "compile": {"placement": "static"}}
    config["backend"] = {"examplejson": {"min_partition_nodes": 1}}
    report = byoc.compare(model, config)
    assert report.passed, report.table()
    assert report.backends_ran() == bool(spatial)
    if not spatial:
        assert "spatial=0" in str(report.plan.decisions["y"].refusals)
