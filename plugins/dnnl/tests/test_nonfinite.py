"""NaN and +-inf as users meet them: dnnl is ``finite_only`` (oneDNN's Relu, Clip, max pooling and
softmax drop NaN), so by default a partition whose inputs hold them runs on onnxruntime."""

from __future__ import annotations

import zipfile

import byoc
import numpy as np
import onnxruntime as ort
import pytest

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


def test_huge_finite_inputs_stay_on_dnnl(p1, recwarn):
    """An input whose sum overflows float32 (the dynamo exporter's attention masks hold
    -3.4e38) is still finite: the partition runs on dnnl, and nothing warns."""
    path, _ = p1
    compiled = byoc.compile(path, config())
    (step,) = compiled.steps
    x = np.random.default_rng(0).random(SHAPES["x"], dtype=np.float32)
    x[0, 0, :4] = np.finfo(np.float32).max
    compiled.run({"x": x})
    assert step._fallback is None  # never made: onnxruntime did not run it
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    x[0, 0, 0, 0] = np.inf
    compiled.run({"x": x})
    assert step._fallback is not None
