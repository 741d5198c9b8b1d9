"""Models whose weights are large: byoc reads, checks and partitions them without copies it
does not need; a model too large for protobuf to pass around is not partitioned: given as a
file, onnxruntime runs it whole from there."""

from __future__ import annotations

import byoc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from byoc import loading
from byoc.cli import main
from byoc.testing.build import make_model, node


def _dense(width: int, batch: int | str = 2) -> onnx.ModelProto:
    """x -> MatMul(w1) -> Relu -> Reshape(constant shape) -> MatMul(w2): weights of
    ``width`` x ``width`` floats, a shape read from a small constant."""
    rng = np.random.default_rng(0)
    return make_model(
        [
            node("MatMul", ["x", "w1"], "h"),
            node("Relu", ["h"], "r"),
            node("Reshape", ["r", "shape"], "f"),
            node("MatMul", ["f", "w2"], "y"),
        ],
        {"x": [batch, width]},
        ["y"],
        constants={
            "w1": rng.standard_normal((width, width), np.float32) / width,
            "w2": rng.standard_normal((width, 3), np.float32),
            "shape": np.array([-1, width], np.int64),
        },
    )


def test_weights_left_out_of_checking_and_inference_change_nothing():
    """ONNX's checker and shape inference see large initializers as typed inputs: the types
    they give (shape inference read the small Reshape shape's value) are the same, and the
    model runs as onnxruntime runs it."""
    model = _dense(300)  # w1: 360 KB
    plan = byoc.partition(model, {"backends": ["examplejson"]})
    types = {v.name: v.type for v in plan.model.graph.value_info}
    dims = [d.dim_value for d in types["f"].tensor_type.shape.dim]
    assert dims == [2, 300]
    assert [t.name for t in plan.model.graph.initializer] == ["w1", "w2", "shape"]
    assert len(plan.model.graph.input) == 1  # the weights are not made inputs of the model
    report = byoc.compare(model, {"backends": ["examplejson"], "compile": {"placement": "static"}})
    assert report.passed and report.backends_ran()


def test_a_broken_model_with_large_weights_still_gets_the_checkers_error():
    model = _dense(300)
    model.graph.node[1].op_type = "NoSuchOp"
    with pytest.raises(byoc.ModelError, match=r"not valid ONNX.*NoSuchOp"):
        byoc.partition(model)


def test_a_plan_partitioned_again_reuses_its_reading_of_the_model():
    """Measured placement partitions the model once a round: from the plan, the model is not
    read, checked and inferred again (a 500 MB model: 4 copies of its weights each time)."""
    config = {"backends": ["examplejson"], "shapes": {"x": [2, 64]}}
    plan = byoc.partition(_dense(64, batch="n"), config)
    again = byoc.partition(plan, config, vetoes={"h": {"x": "y"}})  # no backend "x"
    assert again.graph is plan.graph and again.source is plan.source
    assert again.to_json() == plan.to_json()
    other = byoc.partition(plan, {"backends": ["examplejson"], "shapes": {"x": [4, 64]}})
    assert other.graph is not plan.graph  # other [shapes]: specialized anew
    assert [d.dim_value for d in other.model.graph.input[0].type.tensor_type.shape.dim] == [4, 64]


def test_a_model_over_2_gib_is_not_partitioned_and_its_weights_are_not_read(tmp_path):
    """protobuf serializes at most 2 GiB, and byoc passes partitions and segments serialized;
    such a model ended with "not valid ONNX: Failed to serialize proto" after reading all of
    its external data (2.5 GB: 16 s and 5 GB of memory), now with a clear error at once. The
    data file here is never read: it does not even exist."""
    model = make_model([node("MatMul", ["x", "w"], "y")], {"x": [1, 2**15]}, ["y"])
    weight = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[2**15, 2**14])
    weight.data_location = onnx.TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="w.bin")
    model.graph.initializer.append(weight)
    onnx.save(model, tmp_path / "big.onnx")
    with pytest.raises(byoc.ModelError, match=r"holds 2\.0 GiB of weights.*limits to 2 GiB"):
        byoc.partition(str(tmp_path / "big.onnx"))


def test_a_model_too_large_to_partition_runs_whole_on_onnxruntime_from_its_file(
    tmp_path, monkeypatch, capsys
):
    """A model past protobuf's limit (lowered here: 64 KiB) given as a file compiles to one
    onnxruntime session of that file, which reads the external data itself, with one line
    saying so; it runs, compares and runs from the command line as plain onnxruntime does.
    It cannot be saved to a .byoc file, nor partitioned: both say what to do instead."""
    monkeypatch.setattr(loading, "MAX_WEIGHT_BYTES", 1 << 16)
    path = tmp_path / "m.onnx"
    onnx.save(_dense(300), path, save_as_external_data=True, location="m.data")  # 360 KB
    monkeypatch.chdir(tmp_path.parent)  # the data is found beside the model, not here
    config = {"backends": ["examplejson"], "compile": {"placement": "static"}}
    with pytest.warns(UserWarning, match=r"onnxruntime runs the whole model from its file$"):
        compiled = byoc.compile(str(path), config)
    assert compiled.plan is None and compiled.file == str(path)
    x = np.random.default_rng(1).standard_normal((2, 300), np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert np.array_equal(compiled.run({"x": x})["y"], want[0])
    with pytest.warns(UserWarning):
        report = byoc.compare(str(path), config, {"x": x})
    assert report.passed and not report.backends_ran()
    with pytest.raises(byoc.ModelError, match=r"too large for byoc to partition.*run the \.onnx"):
        compiled.save(tmp_path / "m.byoc")
    with pytest.raises(byoc.ModelError, match=r"byoc cannot partition it.*Given as a file"):
        byoc.partition(str(path), config)
    np.save(tmp_path / "x.npy", x)
    argv = ["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / "out")]
    assert main(argv) == 0
    assert np.array_equal(np.load(tmp_path / "out" / "y.npy"), want[0])
    assert "onnxruntime runs the whole model from its file" in capsys.readouterr().err
    assert main(["compile", str(path), "-o", str(tmp_path / "m.byoc")]) != 0
    assert "run the .onnx file itself" in capsys.readouterr().err


def test_a_weight_transposed_by_the_model_stays_transposed_when_partitioned_again():
    """A Transpose of a weight (GPT-2's tied LM head) is folded into a constant once. Measured
    placement partitions the plan again each round, and large cached weights are dropped
    between rounds: the folded one must stay, as the transposed value (it was read back
    untransposed, and onnxruntime refused the returned partition: shapes did not fit)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1024, 512), np.float32)  # 2 MiB
    model = make_model(
        [
            node("Transpose", ["w"], "wt", perm=[1, 0]),
            node("MatMul", ["x", "wt"], "h"),
            node("Relu", ["h"], "y"),
        ],
        {"x": [2, 512]},
        ["y"],
        constants={"w": w},
    )
    config = {"backends": ["examplejson"]}
    plan = byoc.partition(model, config)
    again = byoc.partition(plan, config, vetoes={"y": {"examplejson": "lost"}})
    assert again.graph is plan.graph
    folded = [
        onnx.numpy_helper.to_array(t)
        for p in again.partitions
        for t in p.model.graph.initializer
        if t.name == "wt"
    ]
    assert len(folded) == 1 and np.array_equal(folded[0], w.T)
    report = byoc.compare(model, {**config, "compile": {"placement": "static"}})
    assert report.passed
