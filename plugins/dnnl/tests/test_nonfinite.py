"""NaN and +-inf as users meet them: dnnl is ``finite_only`` (oneDNN's Relu, Clip, max pooling and
softmax drop NaN), so by default a partition whose inputs hold them runs on onnxruntime."""

from __future__ import annotations

import zipfile

import byoc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from byoc.testing.build import make_model, node

SHAPES = {"x": [1, 3, 48, 192]}
OUT = "save_infer_model/scale_0.tmp_1"


def config(nonfinite: str = "onnxruntime", codegen: str = "json") -> dict:
    return {
        "backends": ["dnnl"],
        "shapes": SHAPES,
        "backend": {"dnnl": {"codegen": codegen}},
        "fallback": {"nonfinite_inputs": nonfinite},
    }


@pytest.fixture(scope="module")
def p1(real_model):
    path = real_model("P1")
    return path, ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("codegen", ["json", "c"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_nan_image_gives_what_onnxruntime_gives(p1, codegen, value):
    """P1 (MobileNetV3 with Relu and HardSwish) on an image holding one special pixel: byoc's
    result is onnxruntime's, NaN where it has NaN; finite inputs still run on dnnl."""
    path, reference = p1
    compiled = byoc.compile(path, config(codegen=codegen))
    assert [s.unit.backend for s in compiled.steps] == ["dnnl"]
    x = np.random.default_rng(0).random(SHAPES["x"], dtype=np.float32)
    finite = compiled.run({"x": x})
    np.testing.assert_allclose(finite[OUT], reference.run(None, {"x": x})[0], 1e-4, 1e-5)
    x[0, 1, 10, 20] = value
    want = reference.run(None, {"x": x})[0]
    got = compiled.run({"x": x})[OUT]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, 1e-4, 1e-5)


def test_the_guard_is_a_choice_and_a_saved_file_keeps_it(p1, tmp_path):
    """nonfinite_inputs = "backend" lets dnnl run NaN (its Relu makes numbers of it); a saved
    model carries its partitions' ONNX so that a loaded one guards too."""
    path, reference = p1
    x = np.full(SHAPES["x"], np.nan, np.float32)
    assert np.isnan(reference.run(None, {"x": x})[0]).all()
    raw = byoc.compile(path, config("backend"))
    assert not np.isnan(raw.run({"x": x})[OUT]).any()  # why the guard exists
    saved = byoc.compile(path, config()).save(tmp_path / "p1.byoc")
    with zipfile.ZipFile(saved) as zf:
        assert any(n.endswith(".onnx") for n in zf.namelist())
    loaded = byoc.load(saved)
    assert [s.guarded for s in loaded.steps] == [True]
    assert np.isnan(loaded.run({"x": x})[OUT]).all()


def test_inputs_that_overflow_inside_give_what_onnxruntime_gives(p1, recwarn):
    """An image of 3e38 is finite, but P1's convolutions overflow it to inf, and inf - inf to
    NaN, where onnxruntime keeps NaN and oneDNN's HardSwish and Relu make numbers: an input of
    magnitude 1e15 or more (``max_magnitude``) runs on onnxruntime, silently; an image of
    ordinary values stays on dnnl."""
    path, reference = p1
    x = np.full(SHAPES["x"], 3e38, np.float32)
    want = reference.run(None, {"x": x})[0]
    assert np.isnan(want).all()
    raw = byoc.compile(path, config("backend"))
    assert not np.isnan(raw.run({"x": x})[OUT]).any()  # why the bound exists
    compiled = byoc.compile(path, config())
    (step,) = compiled.steps
    ordinary = np.random.default_rng(0).random(SHAPES["x"], dtype=np.float32)
    ordinary[0, 0, :4] = 1e14
    compiled.run({"x": ordinary})
    assert step._fallback is None  # never made: onnxruntime did not run it
    np.testing.assert_array_equal(compiled.run({"x": x})[OUT], want)
    assert step._fallback is not None
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.usefixtures("keep_tiny")
def test_a_conv_matmul_softmax_that_overflows_gives_what_onnxruntime_gives():
    """Conv -> Relu -> Conv -> Relu -> GlobalAveragePool -> MatMul -> Softmax on an input of
    -3e38: the first convolution overflows to +-inf, the second makes NaN of inf - inf, which
    onnxruntime keeps and oneDNN's Relu maps to 0 (0.25 for each class). byoc gives
    onnxruntime's NaN, and runs ordinary inputs on dnnl."""
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
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    huge = {"x": np.full((1, 3, 8, 8), -3e38, np.float32)}
    (want,) = reference.run(None, huge)
    assert np.isnan(want).all()
    raw = byoc.compile(model, {"backends": ["dnnl"], "fallback": {"nonfinite_inputs": "backend"}})
    assert not np.isnan(raw.run(huge)["y"]).any()  # why the bound exists
    compiled = byoc.compile(model, {"backends": ["dnnl"]})
    (step,) = compiled.steps
    assert step.unit.backend == "dnnl", compiled.plan.table()
    x = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(x)["y"], reference.run(None, x)[0], 1e-5)
    assert step._fallback is None
    np.testing.assert_array_equal(compiled.run(huge)["y"], want)
    assert step._fallback is not None


@pytest.mark.usefixtures("keep_tiny")
def test_a_torchscript_attention_mask_stays_on_dnnl() -> None:
    """PyTorch's TorchScript exporter masks attention with a true -inf, Where(mask, 0, -inf)
    on the int64 attention_mask (onnxruntime runs it): a padded sequence, or one masked
    entirely (NaN, as in onnxruntime), still runs the attention on dnnl; NaN in x does not."""
    rng = np.random.default_rng(0)
    consts = {f"w{n}": rng.standard_normal((16, 16)).astype(np.float32) for n in "qkv"}
    consts |= {"zero": np.float32(0), "ninf": np.float32(-np.inf), "four": np.float32(4)}
    consts |= {"keys": np.array([1, 1, 8], np.int64)}
    nodes = [node("MatMul", ["x", f"w{n}"], n) for n in "qkv"]
    nodes += [
        node("Cast", ["attention_mask"], "keep", to=onnx.TensorProto.BOOL),
        node("Where", ["keep", "zero", "ninf"], "m0"),
        node("Reshape", ["m0", "keys"], "m"),
        node("Transpose", ["k"], "kt", perm=[0, 2, 1]),
        node("MatMul", ["q", "kt"], "s"),
        node("Div", ["s", "four"], "s4"),
        node("Add", ["s4", "m"], "sm"),
        node("Softmax", ["sm"], "p", axis=-1),
        node("MatMul", ["p", "v"], "y"),
    ]
    inputs = {"x": [1, 8, 16], "attention_mask": (np.int64, [1, 8])}
    model = make_model(nodes, inputs, ["y"], consts)
    compiled = byoc.compile(model, {"backends": ["dnnl"]})
    (step,) = [s for s in compiled.steps if s.unit.backend == "dnnl"]
    assert "m0" in step.unit.inputs, compiled.plan.table()  # the -inf enters dnnl
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((1, 8, 16)).astype(np.float32)
    for valid in (8, 5, 1, 0):
        feeds = {"x": x, "attention_mask": (np.arange(8) < valid).astype(np.int64)[None]}
        want = reference.run(None, feeds)[0]
        np.testing.assert_allclose(compiled.run(feeds)["y"], want, 1e-4, 1e-5)
        assert np.isnan(want).all() == (valid == 0)
    assert step._fallback is None  # onnxruntime never ran the attention
    x[0, 0, 0] = np.nan
    compiled.run({"x": x, "attention_mask": feeds["attention_mask"]})
    assert step._fallback is not None
