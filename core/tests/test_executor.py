"""Running a compiled model: input checks, many threads, outputs equal to onnxruntime."""

from __future__ import annotations

import threading
from collections.abc import Callable

import byoc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from byoc.testing.build import make_model, node

CFG = {"backends": ["examplejson"], "backend": {"examplejson": {"ops": ["Add", "Mul", "Relu"]}}}


def model():
    return make_model(
        [
            node("Add", ["x", "y"], "a"),
            node("Tanh", ["a"], "t"),
            node("Mul", ["t", "y"], "m"),
            node("Relu", ["m"], "r"),
        ],
        {"x": ["N", 4], "y": [1, 4]},
        ["r", "t"],
    )


def reference(x, y):
    t = np.tanh(x + y)
    return np.maximum(t * y, 0), t


def test_run_matches_numpy_with_symbolic_batch():
    compiled = byoc.compile(model(), CFG)
    assert [s.unit.backend for s in compiled.steps] == ["examplejson", "onnxruntime", "examplejson"]
    for n in (1, 5):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        y = np.ones((1, 4), np.float32)
        out = compiled.run({"x": x, "y": y})
        want_r, want_t = reference(x, y)
        np.testing.assert_allclose(out["r"], want_r, rtol=1e-6)
        np.testing.assert_allclose(out["t"], want_t, rtol=1e-6)


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        ({"x": np.zeros((2, 4), np.float32)}, "missing input 'y'"),
        (
            {"x": np.zeros((2, 4), np.float32), "y": np.zeros((1, 4), np.float32), "z": 1},
            "unknown input 'z'",
        ),
        (
            {"x": np.zeros((2, 4), np.float64), "y": np.zeros((1, 4), np.float32)},
            "input 'x' has dtype float64 but the model expects float32",
        ),
        (
            {"x": np.zeros((2, 4, 1), np.float32), "y": np.zeros((1, 4), np.float32)},
            "input 'x' has shape (2, 4, 1) (rank 3) but the model expects ('N', 4) (rank 2)",
        ),
        ({"x": np.zeros((2, 5), np.float32), "y": np.zeros((1, 4), np.float32)}, "dim 1 must be 4"),
    ],
)
@pytest.mark.parametrize("backends", [["examplejson"], []], ids=["partitioned", "one-session"])
def test_bad_inputs_are_input_errors(inputs, words, backends):
    # with no backend, one onnxruntime session runs the model, called natively (no Python checks)
    compiled = byoc.compile(model(), {**CFG, "backends": backends})
    assert len(compiled.steps) == (1 if not backends else 3)
    with pytest.raises(byoc.InputError) as err:
        compiled.run(inputs)
    assert words in str(err.value)


def test_inconsistent_symbolic_dims():
    m = make_model([node("Add", ["x", "y"], "a")], {"x": ["N", 4], "y": ["N", 4]}, ["a"])
    compiled = byoc.compile(m, CFG)
    with pytest.raises(byoc.InputError, match="'N': 2 in input 'x' but 3 in input 'y'"):
        compiled.run({"x": np.zeros((2, 4), np.float32), "y": np.zeros((3, 4), np.float32)})


def test_many_threads_get_their_own_answers():
    compiled = byoc.compile(model(), CFG)
    y = np.full((1, 4), 0.5, np.float32)
    inputs = [np.full((3, 4), i / 10, np.float32) for i in range(8)]
    expected = [reference(x, y)[0] for x in inputs]
    errors: list[str] = []

    def work(i):
        for _ in range(40):
            got = compiled.run({"x": inputs[i], "y": y})["r"]
            if not np.array_equal(
                got, compiled.run({"x": inputs[i], "y": y})["r"]
            ) or not np.allclose(got, expected[i], rtol=1e-6):
                errors.append(f"thread {i}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_load_module_runs_a_hand_written_examplejson_file(tmp_path):
    path = tmp_path / "subgraph_0.examplejson"
    path.write_text(
        "subgraph_0\n  input 0 10 10\n  input 1 10 10\n  add 2 inputs: 0 1 shape: 10 10\n"
    )
    module = byoc.load_module(path, "examplejson")  # as in TVM's guide: no output line
    a, b = np.ones((10, 10), np.float32), np.full((10, 10), 2, np.float32)
    np.testing.assert_array_equal(module.run([a, b])[0], a + b)
    path.write_text(path.read_text() + "  output 0\n")  # byoc's extension picks another output
    np.testing.assert_array_equal(byoc.load_module(path, "examplejson").run([a, b])[0], a)
    path.write_text("subgraph_0\n  input 0 10 10\n")
    with pytest.raises(byoc.ArtifactError, match="no ops and no 'output' line"):
        byoc.load_module(path, "examplejson")
    with pytest.raises(byoc.ArtifactError, match="not installed"):
        byoc.load_module(path, "nosuch")


def test_inputs_of_every_form_give_the_same_outputs_with_static_shapes():
    """With static input shapes, exact arrays skip the general check (a fast path); views,
    other byte orders and lists take it, and give the same outputs; the caller's dict and
    arrays are left as they were, and a wrong dtype or shape is still an InputError."""
    m = make_model(model().graph.node, {"x": [3, 4], "y": [1, 4]}, ["r", "t"])
    compiled = byoc.compile(m, CFG)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32).T  # not C order
    y = np.full((1, 4), 0.5, np.float32)
    want = reference(x, y)
    for given in (
        {"x": np.ascontiguousarray(x), "y": y},
        {"x": x, "y": y},
        {"x": x.astype(">f4"), "y": y},
        {"x": x.tolist(), "y": y},
    ):
        before = dict(given)
        out = compiled.run(given)
        np.testing.assert_allclose(out["r"], want[0], rtol=1e-6)
        np.testing.assert_allclose(out["t"], want[1], rtol=1e-6)
        assert given.keys() == before.keys() and all(given[k] is before[k] for k in given)
    with pytest.raises(byoc.InputError, match="dtype float64"):
        compiled.run({"x": np.zeros((3, 4)), "y": y})
    with pytest.raises(byoc.InputError, match="dim 0 must be 3"):
        compiled.run({"x": np.zeros((2, 4), np.float32), "y": y})


@pytest.mark.parametrize("load", [False, True])
def test_outputs_belong_to_the_caller(tmp_path, load):
    """A constant output and a pass-through input come back as fresh arrays every run, the
    same for a model compiled now and one loaded from a .byoc file."""
    model = make_model(
        [node("Relu", ["x"], "r"), node("Identity", ["c"], "k")],
        {"x": [3]},
        ["r", "k", "x"],
        constants={"c": np.arange(3, dtype=np.float32)},
    )
    compiled = byoc.compile(model, {"backends": ["examplejson"]})
    if load:
        compiled = byoc.load(compiled.save(tmp_path / "m.byoc"))
    x = np.ones(3, np.float32)
    first = compiled.run({"x": x})
    assert first["x"] is not x and not np.shares_memory(first["x"], x)
    first["k"][:] = 99
    first["x"][:] = 7
    again = compiled.run({"x": x})
    np.testing.assert_array_equal(again["k"], [0, 1, 2])
    np.testing.assert_array_equal(x, [1, 1, 1])


def test_one_session_runs_identity_copies_of_weights_as_weights():
    """TorchScript writes an Identity for each shared weight; onnxruntime's CPU provider then
    misses its fp16 convolution kernels (a half-precision SqueezeNet: 4.5 ms, 2.9 ms without).
    The one session of a plan with no partition holds them as weights: same outputs."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float16)
    m = make_model(
        [
            node("Identity", ["w"], "w1"),
            node("Identity", ["w1"], "w2"),  # a copy of a copy
            node("Conv", ["x", "w2"], "c", pads=[1, 1, 1, 1]),
            node("Relu", ["c"], "y"),
        ],
        {"x": (np.float16, [1, 3, 8, 8])},
        ["y"],
        {"w": w},
    )
    compiled = byoc.compile(m, {"backends": []})
    (step,) = compiled.steps
    assert [n.op_type for n in step.unit.model.graph.node] == ["Conv", "Relu"]
    assert compiled._direct is not None  # still the model as read, called directly
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float16)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], want)


def _if_range() -> onnx.ModelProto:
    """byoc folds the If's condition (Size of a static input) that onnxruntime computed; its
    ConstantFolding then inlines the If, and its shape check refuses the Range bound of shape
    [1] the branch gives, which its kernel runs (ONNX's AffineGrid expansion does this)."""
    from onnx import TensorProto, helper

    def branch(value: int) -> onnx.GraphProto:
        bound = helper.make_tensor("v", TensorProto.INT64, [1], [value])
        return helper.make_graph(
            [helper.make_node("Constant", [], ["d"], value=bound)],
            "branch",
            [],
            [helper.make_tensor_value_info("d", TensorProto.INT64, [1])],
        )

    return make_model(
        [
            node("Size", ["x"], "n"),
            node("Equal", ["n", "four"], "c"),
            node("If", ["c"], "D", then_branch=branch(3), else_branch=branch(2)),
            node("Range", ["zero", "D", "one"], "r"),
            node("Cast", ["r"], "f", to=TensorProto.FLOAT),
            node("ReduceSum", ["x"], "s", keepdims=0),
            node("Add", ["f", "s"], "y"),
        ],
        {"x": [4]},
        ["y"],
        {k: np.array(v, np.int64) for k, v in {"four": 4, "zero": 0, "one": 1}.items()},
    )


def _pad_pool() -> onnx.ModelProto:
    """onnxruntime's PadFusion folds the Pad into the MaxPool's pads until they reach the
    kernel, and then refuses the model (random graphs found it)."""
    return make_model(
        [
            node("Pad", ["x", "pads"], "p"),
            node("MaxPool", ["p"], "y", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        ],
        {"x": [1, 2, 5, 5]},
        ["y"],
        {"pads": np.array([0, 0, 2, 2, 0, 0, 2, 2], np.int64)},
    )


@pytest.mark.parametrize("build", [_if_range, _pad_pool])
def test_a_segment_onnxruntime_breaks_when_optimizing_runs_unoptimized(
    build: Callable[[], onnx.ModelProto],
) -> None:
    """A segment onnxruntime refuses after its own graph rewrites runs with them off, and
    compile says so in one line; the outputs are onnxruntime's, unoptimized."""
    model = build()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), options).run(None, {"x": x})[0]
    with pytest.warns(UserWarning, match="runs unoptimized"):
        compiled = byoc.compile(model, {"compile": {"placement": "static"}})
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], want)
